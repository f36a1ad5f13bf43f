#!/bin/sh
# A reference agent for envharness protocol v1 in POSIX sh, with awk for reading JSON.
#
# Run it with `envharness protocol check -- sh agents/shell/echo_agent.sh`, or in a session as
# CommandAgent(["sh", "agents/shell/echo_agent.sh"], implementation="echo@1").
#
# Its policy suits envharness.fixtures.SyntheticEnvironment: step the observed `total` one unit
# toward `target` (toward 0 when there is none); any other observation gets {"value": 0}. Its
# state is two counters (acts answered, feedback received), which is all a snapshot needs.
#
# A shell cannot parse JSON, so each line goes through a small awk scanner that walks the
# object's structure (strings, nesting) and prints only the fields this agent needs, as raw JSON
# tokens. Ids are echoed exactly as received, escapes and all; nothing in an observation (not
# even a nested "id" or "type") can be mistaken for a top-level field.
#
# stdout carries protocol lines only (each printf is written before the next command runs);
# diagnostics go to stderr (one line after the handshake) or travel as `log` messages. It exits
# with status 0 after `shutdown` or at the end of its input, and with 1 when the host offers no
# version it speaks. SIGTERM ends it at once (the shell's default).

LC_ALL=C # awk counts bytes, whatever locale the host passes
export LC_ALL

IMPLEMENTATION='echo-agent-sh@1'
FIELDS='type id turn protocols participant seed observation.total observation.target state.acts state.feedback'

# Prints, one per line and in the order of `want`, the raw JSON of each field named by a dotted
# path ("observation.total"), or an empty line where the field is absent.
SCANNER='
BEGIN { count = split(want, wanted, " "); for (w = 1; w <= count; w++) wantset[wanted[w]] = 1 }
function path(   p, d) {
    p = ""
    for (d = 1; d <= depth; d++) p = p (d > 1 ? "." : "") (kind[d] == "{" ? key[d] : "#")
    return p
}
function record(p, value) { if (p in wantset) found[p] = value }
{
    s = $0; n = length(s); i = 1; depth = 0; expect_key = 0
    while (i <= n) {
        c = substr(s, i, 1)
        if (c == " " || c == "\t" || c == "\r" || c == ":") { i++; continue }
        if (c == "{" || c == "[") {
            p = path(); depth++; kind[depth] = c; key[depth] = ""; start[depth] = i
            opened[depth] = p; expect_key = (c == "{"); i++; continue
        }
        if (c == "}" || c == "]") {
            if (depth > 0) record(opened[depth], substr(s, start[depth], i - start[depth] + 1))
            depth--; expect_key = 0; i++; continue
        }
        if (c == ",") { expect_key = (depth > 0 && kind[depth] == "{"); i++; continue }
        j = i + 1
        if (c == "\"") {
            while (j <= n) {
                d = substr(s, j, 1)
                if (d == "\\") j += 2
                else if (d == "\"") break
                else j++
            }
            token = substr(s, i, j - i + 1); i = j + 1
            if (expect_key) { key[depth] = substr(token, 2, length(token) - 2); expect_key = 0 }
            else record(path(), token)
            continue
        }
        while (j <= n && index(",}] \t\r", substr(s, j, 1)) == 0) j++
        record(path(), substr(s, i, j - i)); i = j
    }
}
END { for (w = 1; w <= count; w++) print ((wanted[w] in found) ? found[wanted[w]] : "") }
'

send() {
    printf '%s\n' "$1"
}

log() { # level, message (the message must need no JSON escaping)
    send "{\"type\":\"log\",\"level\":\"$1\",\"message\":\"$2\"}"
}

is_integer() {
    case ${1#-} in
        '' | *[!0-9]*) return 1 ;;
    esac
}

acts=0
feedback=0
while IFS= read -r line || [ -n "$line" ]; do
    case $line in
        *[![:space:]]*) ;;
        *) continue ;; # blank lines carry nothing
    esac
    fields=$(printf '%s\n' "$line" | awk -v want="$FIELDS" "$SCANNER")
    { IFS= read -r type; IFS= read -r id; IFS= read -r turn; IFS= read -r protocols
      IFS= read -r participant; IFS= read -r seed; IFS= read -r total; IFS= read -r target
      IFS= read -r state_acts; IFS= read -r state_feedback; } <<FIELDS
$fields
FIELDS
    case $type in
        '"hello"')
            case $(printf '%s' "$protocols" | tr -d ' \t\r') in
                *[[,]1[],]*) ;;
                *)
                    send '{"type":"error","message":"this agent speaks protocol version 1 only"}'
                    exit 1
                    ;;
            esac
            printf 'echo agent: %s (seed %s)\n' "$participant" "$seed" >&2
            send "{\"type\":\"ready\",\"protocol\":1,\"implementation\":\"$IMPLEMENTATION\",\"capabilities\":[\"snapshot\"]}"
            ;;
        '"act"')
            acts=$((acts + 1))
            value=0
            if is_integer "$total"; then
                goal=0
                if is_integer "$target"; then goal=$target; fi
                if [ "$total" -lt "$goal" ]; then
                    value=1
                elif [ "$total" -gt "$goal" ]; then
                    value=-1
                fi
            fi
            is_integer "$turn" || turn='?'
            log debug "turn $turn: {\\\"value\\\":$value}"
            send "{\"type\":\"action\",\"id\":$id,\"action\":{\"value\":$value}}"
            ;;
        '"feedback"')
            feedback=$((feedback + 1)) # counted, never answered
            ;;
        '"snapshot"')
            send "{\"type\":\"state\",\"id\":$id,\"state\":{\"acts\":$acts,\"feedback\":$feedback}}"
            ;;
        '"restore"')
            acts=0
            feedback=0
            if is_integer "$state_acts"; then acts=$state_acts; fi
            if is_integer "$state_feedback"; then feedback=$state_feedback; fi
            send "{\"type\":\"restored\",\"id\":$id}"
            ;;
        '"shutdown"')
            log info "bye after $acts acts"
            exit 0
            ;;
        *)
            if [ -n "$id" ]; then # a request this version does not know: say so, do not stall
                send "{\"type\":\"error\",\"id\":$id,\"message\":\"unknown request\"}"
            else
                log warning "ignored a message of an unknown type"
            fi
            ;;
    esac
done
exit 0 # the end of input means the same as shutdown
