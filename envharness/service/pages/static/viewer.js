// envharness viewer: live updates through EventSource. No framework, no build step.
//
// A page that shows the live end of a running session carries data-live (the session id) and
// data-after (the last seq it rendered). This script opens the session's event stream after
// that seq and renders each record the way the server renders it (render.py / html.py:
// same classes, same ids). Every value is set through textContent, never as markup.
"use strict";

(function () {
  const INLINE_KEYS = 8;
  const TEXT_LIMIT = 400;
  const LIST_LIMIT = 24;
  const COLUMNS = { observation: "observed", hint: "observed", "action.attempted": "attempted",
                    "action.executed": "result", "action.blocked": "result", cost: "attempted",
                    "outcome.participant": "result" };
  const TEXT_VIEW_LIMIT = 8000;
  const PREVIEW_BYTES = 4096;

  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function number(value) {
    if (Number.isInteger(value)) return String(value);
    return Number(value.toPrecision(4)).toString();
  }

  function scalar(value) {
    if (value === null) return el("span", "null", "null");
    if (typeof value === "boolean") return el("span", "bool", value ? "true" : "false");
    if (typeof value === "number") return el("span", "num", number(value));
    const text = String(value);
    return el("span", "str", text.length > TEXT_LIMIT ? text.slice(0, TEXT_LIMIT - 1) + "…" : text);
  }

  function isScalar(value) {
    return value === null || ["boolean", "number", "string"].includes(typeof value);
  }

  function isFlat(value) {
    return isScalar(value) || (Array.isArray(value) && value.every(isScalar));
  }

  function list(items) {
    const span = el("span", "list", "[");
    items.slice(0, LIST_LIMIT).forEach((item, index) => {
      if (index) span.append(", ");
      span.append(scalar(item));
    });
    if (items.length > LIST_LIMIT) span.append(el("span", "more", ", … " + (items.length - LIST_LIMIT) + " more"));
    span.append("]");
    return span;
  }

  function renderValue(value) {
    if (isScalar(value)) return scalar(value);
    if (Array.isArray(value) && isFlat(value)) return list(value);
    if (value && typeof value === "object" && !Array.isArray(value)) {
      const keys = Object.keys(value);
      if (keys.length === 0) return el("span", "empty", "{}");
      if (keys.length <= INLINE_KEYS && keys.every((key) => isFlat(value[key]))) {
        const chips = el("span", "kvs");
        for (const key of keys) {
          const chip = el("span", "kv");
          chip.append(el("span", "k", key));
          chip.append(Array.isArray(value[key]) ? list(value[key]) : scalar(value[key]));
          chips.append(chip);
        }
        return chips;
      }
    }
    return el("pre", "json", JSON.stringify(value, null, 2));
  }

  // Nested values as key/value tables, as pages/value_view.py draws them: every field name
  // in view, lists past KV_ITEMS and strings past KV_STRING counted, the JSON one click away.
  const KV_DEPTH = 4, KV_ITEMS = 8, KV_FIELDS = 500, KV_ROWS = 20, KV_STRING = 200;

  function kvMore(text) {
    return el("span", "kv-more", text);
  }

  function kvScalar(value) {
    if (typeof value === "string" && value.length > KV_STRING) {
      const span = el("span", "");
      span.append(el("span", "str", value.slice(0, KV_STRING) + "…"),
        kvMore(" " + (value.length - KV_STRING).toLocaleString("en-US") + " more characters"));
      return span;
    }
    return scalar(value);
  }

  function kvItem(value, depth) {
    if (isScalar(value)) return kvScalar(value);
    const isList = Array.isArray(value);
    if (isList && value.every(isScalar)) {
      const span = el("span", "list", "[");
      value.slice(0, KV_ITEMS).forEach((item, index) => {
        if (index) span.append(", ");
        span.append(kvScalar(item));
      });
      if (value.length > KV_ITEMS) span.append(kvMore(", … " + (value.length - KV_ITEMS).toLocaleString("en-US") + " more"));
      span.append("]");
      return span;
    }
    if (!isList && Object.keys(value).length === 0) return el("span", "empty", "{}");
    if (depth >= KV_DEPTH) {
      const text = JSON.stringify(value);
      if (text.length <= KV_STRING) return el("code", "kv-json", text);
      const span = el("span", "");
      span.append(el("code", "kv-json", text.slice(0, KV_STRING) + "…"),
        kvMore(" " + (text.length - KV_STRING).toLocaleString("en-US") + " more characters"));
      return span;
    }
    const rows = isList ? value.map((item, i) => ["[" + i + "]", item]) : Object.entries(value);
    const limit = isList ? KV_ROWS : KV_FIELDS;
    const table = el("table", "kv-table");
    const body = el("tbody", "");
    for (const [key, item] of rows.slice(0, limit)) {
      const row = el("tr", "");
      const th = el("th", "kv-key", key);
      th.scope = "row";
      const td = el("td", "");
      td.append(kvItem(item, depth + 1));
      row.append(th, td);
      body.append(row);
    }
    if (rows.length > limit) {
      const row = el("tr", "");
      const td = el("td", "kv-more", "… " + (rows.length - limit).toLocaleString("en-US") + " more");
      td.colSpan = 2;
      row.append(td);
      body.append(row);
    }
    table.append(body);
    return table;
  }

  function payloadValue(value) {
    const drawn = renderValue(value);
    if (!drawn.classList.contains("json")) return drawn;
    const box = el("div", "kv-value");
    const json = el("details", "as-json");
    json.append(el("summary", "", "JSON"), drawn);
    box.append(kvItem(value, 0), json);
    return box;
  }

  function seqLink(record) {
    const link = el("a", "seq", "#" + record.seq);
    link.href = "/sessions/" + encodeURIComponent(record.session_id) + "/records/" + record.seq;
    link.title = "record " + record.seq;
    return link;
  }

  function duration(seconds) {
    return seconds < 1 ? (seconds * 1000).toFixed(1) + " ms" : seconds.toFixed(2) + " s";
  }

  function tag(className, text) {
    return el("span", "tag " + className, text);
  }

  // -- text views: ANSI colours as classes, as envharness/_ansi.py and pages/text_view.py do --
  const ESCAPE = new RegExp(
    "(?:\\x1b\\[|\\x9b)([0-?]*)([ -/]*)([@-~])|(?:\\x1b\\[|\\x9b)[0-?]*[ -/]*$" +
    "|(?:\\x1b[\\]PX^_]|[\\x90\\x98\\x9d\\x9e\\x9f])[\\s\\S]*?(?:\\x07|\\x1b\\\\|\\x9c|$)" +
    "|\\x1b[ -/]*[0-~]|\\x1b", "g");
  const CONTROL = /[\x00-\x08\x0b-\x1f\x7f-\x9f]/g;
  const BASIC = [[0, 0, 0], [205, 49, 49], [13, 188, 121], [229, 229, 16], [36, 114, 200],
                 [188, 63, 188], [17, 168, 205], [229, 229, 229], [102, 102, 102], [241, 76, 76],
                 [35, 209, 139], [245, 245, 67], [59, 142, 234], [214, 112, 214], [41, 184, 219],
                 [255, 255, 255]];
  const PLAIN = { fg: null, bg: null, bold: false, dim: false, italic: false, underline: false,
                  inverse: false };

  function nearestBasic(colour) {
    let rgb = colour;
    if (typeof colour === "number") {
      if (colour < 16) return colour;
      if (colour >= 232) {
        const grey = 8 + 10 * (colour - 232);
        rgb = [grey, grey, grey];
      } else {
        const levels = [0, 95, 135, 175, 215, 255];
        const index = colour - 16;
        rgb = [levels[Math.floor(index / 36)], levels[Math.floor(index / 6) % 6], levels[index % 6]];
      }
    }
    let best = 0;
    let distance = Infinity;
    BASIC.forEach((basic, index) => {
      const d = basic.reduce((sum, value, i) => sum + (value - rgb[i]) ** 2, 0);
      if (d < distance) { best = index; distance = d; }
    });
    return best;
  }

  function extended(fields) {
    const numbers = fields.map(Number);
    if (numbers.some((n) => !Number.isInteger(n))) return null;
    if (numbers[0] === 5 && numbers.length === 2 && numbers[1] >= 0 && numbers[1] <= 255) return numbers[1];
    if (numbers[0] === 2 && numbers.length >= 4) {
      const rgb = numbers.slice(-3);
      if (rgb.every((n) => n >= 0 && n <= 255)) return rgb;
    }
    return null;
  }

  function applySgr(style, params) {
    if (!params) return Object.assign({}, PLAIN);
    if (!/^[0-9;:]*$/.test(params)) return style;
    style = Object.assign({}, style);
    const codes = params.split(";");
    for (let index = 0; index < codes.length; index++) {
      const code = codes[index];
      if (code.includes(":")) {
        const [head, ...rest] = code.split(":");
        if (head === "38" || head === "48") {
          const colour = extended(rest.filter((part) => part !== ""));
          if (colour !== null) style[head === "38" ? "fg" : "bg"] = colour;
        } else if (head === "4") {
          style.underline = !(rest.length === 1 && rest[0] === "0");
        }
        continue;
      }
      const n = code ? Number(code) : 0;
      if (n === 38 || n === 48) {
        const rest = codes.slice(index + 1);
        let used = rest.length;
        let colour = null;
        if (rest[0] === "5" && rest.length >= 2) { colour = extended(rest.slice(0, 2)); used = 2; }
        else if (rest[0] === "2" && rest.length >= 4) { colour = extended(rest.slice(0, 4)); used = 4; }
        index += used;
        if (colour !== null) style[n === 38 ? "fg" : "bg"] = colour;
      } else if (n === 0) style = Object.assign({}, PLAIN);
      else if (n >= 30 && n <= 37) style.fg = n - 30;
      else if (n >= 40 && n <= 47) style.bg = n - 40;
      else if (n >= 90 && n <= 97) style.fg = n - 90 + 8;
      else if (n >= 100 && n <= 107) style.bg = n - 100 + 8;
      else if (n === 1) style.bold = true;
      else if (n === 2) style.dim = true;
      else if (n === 3) style.italic = true;
      else if (n === 4) style.underline = true;
      else if (n === 7) style.inverse = true;
      else if (n === 22) { style.bold = false; style.dim = false; }
      else if (n === 23) style.italic = false;
      else if (n === 24) style.underline = false;
      else if (n === 27) style.inverse = false;
      else if (n === 39) style.fg = null;
      else if (n === 49) style.bg = null;
    }
    return style;
  }

  function styleClasses(style) {
    let fg = style.fg;
    let bg = style.bg;
    const names = [];
    if (style.inverse) { [fg, bg] = [bg, fg]; names.push("ansi-inverse"); }
    if (fg !== null) names.push("ansi-fg" + nearestBasic(fg));
    if (bg !== null) names.push("ansi-bg" + nearestBasic(bg));
    for (const flag of ["bold", "dim", "italic", "underline"]) if (style[flag]) names.push("ansi-" + flag);
    return names.join(" ");
  }

  function visible(part) {
    return part.replace(CONTROL, (c) => "\\x" + c.charCodeAt(0).toString(16).padStart(2, "0"));
  }

  function textView(text, limit) {
    const pre = el("pre", "textview");
    text = text.replace(/\r\n/g, "\n");
    let style = Object.assign({}, PLAIN);
    let position = 0;
    let shown = 0;
    let total = 0;
    const add = (part) => {
      if (!part) return;
      part = visible(part);
      total += part.length;
      if (limit !== null && shown + part.length > limit) part = part.slice(0, Math.max(limit - shown, 0));
      if (!part) return;
      shown += part.length;
      const classes = styleClasses(style);
      pre.append(classes ? el("span", classes, part) : part);
    };
    for (const match of text.matchAll(ESCAPE)) {
      add(text.slice(position, match.index));
      position = match.index + match[0].length;
      if (match[3] === "m" && !match[2]) style = applySgr(style, match[1]);
    }
    add(text.slice(position));
    if (total <= shown) return pre;
    const holder = document.createDocumentFragment();
    holder.append(pre, el("div", "cut", (total - shown).toLocaleString("en") + " more characters"));
    return holder;
  }

  function rewardChip(payload) {
    if (!("reward" in payload)) return "";
    const chip = el("span", "kv reward");
    chip.append(el("span", "k", "reward"), el("span", "num", payload.reward === null ? "–" : number(payload.reward)));
    return chip;
  }

  // -- artifacts: a link, and a preview chosen by the type the server sends -----------------
  function artifactUrl(record) {
    return "/api/sessions/" + encodeURIComponent(record.session_id) + "/records/" + record.seq + "/artifact";
  }

  function addArtifact(item, record) {
    const url = artifactUrl(record);
    const link = el("a", "artifact-link", record.kind === "artifact" ? "Open" : "Offending bytes");
    link.href = url;
    item.append(" ", link);
    if (record.kind !== "artifact") return;
    fetch(url, { method: "HEAD", credentials: "same-origin" }).then((response) => {
      const type = (response.headers.get("content-type") || "").split(";")[0].trim();
      if (!response.ok) return;
      link.before(" · " + type + " ");
      const preview = el("div", "artifact-preview");
      if (["image/png", "image/jpeg", "image/gif", "image/webp"].includes(type)) {
        const image = el("img");
        image.src = url;
        image.alt = record.payload.name;
        image.loading = "lazy";
        preview.append(image);
        item.append(preview);
      } else if (["text/plain", "text/csv", "text/markdown", "application/json",
                  "application/x-ndjson"].includes(type)) {
        fetch(url, { credentials: "same-origin" }).then((full) => full.arrayBuffer()).then((buffer) => {
          const bytes = new Uint8Array(buffer);
          const text = new TextDecoder("utf-8").decode(bytes.slice(0, PREVIEW_BYTES), { stream: true });
          preview.append(textView(text, null));
          if (bytes.length > PREVIEW_BYTES) {
            preview.append(el("div", "cut", "the first " + PREVIEW_BYTES.toLocaleString("en") + " of " +
                              bytes.length.toLocaleString("en") + " bytes"));
          }
          item.append(preview);
        });
      }
    });
  }

  function cell(record) {
    const payload = record.payload;
    const box = el("div", "rec");
    box.id = "r" + record.seq;
    box.append(seqLink(record));
    switch (record.kind) {
      case "observation":
        if (typeof payload.text === "string") {
          box.className = "rec textual";
          const json = el("details", "as-json");
          json.append(el("summary", "", "JSON"), renderValue(payload.observation));
          box.append(textView(payload.text, TEXT_VIEW_LIMIT), json);
        } else {
          box.append(payloadValue(payload.observation));
        }
        break;
      case "hint":
        box.className = "rec hint";
        box.append(tag("tag-hint", "hint"), " ", payload.text);
        break;
      case "action.attempted":
        box.append(payloadValue(payload.action));
        if (payload.seconds !== null && payload.seconds !== undefined) {
          box.append(" ", el("span", "time", duration(payload.seconds)));
        }
        break;
      case "action.executed":
        box.className = "rec executed";
        box.append(tag("tag-ok", "executed"), " ", payloadValue(payload.outcome), " ", rewardChip(payload));
        break;
      case "outcome.participant":
        box.className = "rec private-outcome";
        box.append(tag("tag-outcome", "outcome"), " ");
        if (payload.outcome !== null && payload.outcome !== undefined) box.append(payloadValue(payload.outcome), " ");
        box.append(rewardChip(payload));
        break;
      case "action.blocked":
        box.className = "rec blocked";
        box.append(tag("tag-blocked", "blocked"), " ", el("span", "by", "by " + payload.by));
        box.append(el("div", "reason", payload.reason));
        break;
      case "cost": {
        box.className = "rec cost";
        box.append(tag("", "cost"));
        const parts = [];
        if (payload.input_tokens != null || payload.output_tokens != null) {
          parts.push((payload.input_tokens || 0) + " in / " + (payload.output_tokens || 0) + " out");
        }
        if (payload.usd != null) parts.push("$" + payload.usd.toFixed(4));
        if (payload.seconds != null) parts.push(duration(payload.seconds));
        if (payload.model) parts.push(payload.model);
        box.append(parts.join(" · ") || "–");
        break;
      }
    }
    return box;
  }

  function turnSection(timeline, turn) {
    let section = document.getElementById("turn-" + turn);
    if (section) return section;
    const empty = timeline.querySelector(".empty-turns");
    if (empty) empty.remove();
    section = el("section", "turn card fresh");
    section.id = "turn-" + turn;
    section.dataset.turn = String(turn);
    const header = el("header");
    header.append(el("h3", "", "Turn " + turn), el("div", "signals"));
    const table = el("table", "grid");
    const head = el("tr");
    for (const name of ["Participant", "Observed", "Attempted", "Result"]) {
      head.append(el("th", "", name));
    }
    const thead = el("thead");
    thead.append(head);
    table.append(thead, el("tbody"));
    section.append(header, table);
    timeline.append(section);
    return section;
  }

  function participantRow(section, participant) {
    const body = section.querySelector("tbody");
    for (const row of body.rows) {
      if (row.dataset.participant === participant) return row;
    }
    const row = el("tr");
    row.dataset.participant = participant;
    const name = el("th", "", participant);
    name.scope = "row";
    row.append(name);
    for (const column of ["observed", "attempted", "result"]) {
      row.append(el("td", "c-" + column));
    }
    body.append(row);
    return row;
  }

  function addToTurn(timeline, record) {
    const section = turnSection(timeline, record.turn);
    const column = COLUMNS[record.kind];
    if (record.participant !== null && column) {
      participantRow(section, record.participant).querySelector(".c-" + column).append(cell(record));
      return;
    }
    if (record.kind === "outcome") {
      const chips = el("span", "outcome");
      chips.id = "r" + record.seq;
      if (record.participant) chips.append(el("span", "who-tag", record.participant), " ");
      for (const [name, value] of Object.entries(record.payload.signals || {})) {
        const chip = el("span", "kv");
        chip.append(el("span", "k", name), el("span", "num", value === null ? "–" : number(value)));
        chips.append(chip);
      }
      if (record.payload.done) chips.append(" ", tag("tag-done", "done"));
      if (record.payload.truncated === true) chips.append(" ", tag("tag-truncated", "truncated"));
      chips.append(" ", seqLink(record));
      section.querySelector(".signals").append(chips);
      return;
    }
    let others = section.querySelector("ul.others");
    if (!others) {
      others = el("ul", "others");
      section.append(others);
    }
    const item = el("li");
    item.id = "r" + record.seq;
    item.append(seqLink(record), " ", el("span", "kind", record.kind));
    if (record.participant) item.append(" ", el("span", "who-tag", record.participant));
    const payload = Object.assign({}, record.payload);
    delete payload.kind;
    if (record.kind === "artifact") {  // as render.py describes it; the type once it is known
      item.append(" ", payload.name + " · " + payload.size.toLocaleString("en") + " bytes");
    } else if (record.kind === "transcript") {  // as render.py describes it
      const roles = payload.messages.map((message) => String(message.role)).join(", ");
      item.append(" ", payload.messages.length + " message(s) added to its conversation: " + roles);
    } else {
      item.append(" ", renderValue(payload));
    }
    if (record.kind === "artifact" || (record.kind === "protocol.violation" && record.payload.artifact)) {
      addArtifact(item, record);
    }
    others.append(item);
  }

  // Session-level records shown between turns (render.py: is_marker / marker): a checkpoint,
  // a segment that resumed or continued the session, an intervention, a branch.
  function markerParts(record) {
    const payload = record.payload;
    switch (record.kind) {
      case "checkpoint":
        return ["⚑", "checkpoint", "Checkpoint",
                "after turn " + payload.turn + ": the state kept to branch from"];
      case "segment.started":
        if (payload.cause === "start") return null;
        if (payload.cause === "branch") {
          return ["▸", "segment", "Branch starts", "from the parent's state after turn " + payload.turn];
        }
        if (payload.until !== null && payload.until !== undefined) {
          return ["▸", "segment", "Continued", "after turn " + payload.turn + ", to turn " + payload.until];
        }
        return ["▸", "segment", "Resumed", "after turn " + payload.turn];
      case "intervention":
        return payload.rejected
          ? ["✕", "refused", "Intervention refused", payload.rejected + " (no branch was made)"]
          : ["✎", "intervention", "Intervention", ""];
      case "branch":
        return ["↳", "branch", "Branched", "from " + payload.parent_session + " at checkpoint #" + payload.checkpoint_seq];
      default:
        return null;
    }
  }

  function addMarker(timeline, record) {
    const parts = markerParts(record);
    if (!parts || document.getElementById("r" + record.seq)) return;
    const [icon, css, title, text] = parts;
    const box = el("div", "marker marker-" + css + " fresh");
    box.id = "r" + record.seq;
    const mark = el("span", "marker-icon", icon);
    mark.setAttribute("aria-hidden", "true");
    const line = el("div", "marker-line");
    line.append(seqLink(record), el("b", "", title), " ", text);
    if (record.kind === "intervention") line.append(" ", renderValue(record.payload.intervention));
    const body = el("div", "marker-body");
    body.append(line);
    box.append(mark, body);
    const empty = timeline.querySelector(".empty-turns");
    if (empty) empty.remove();
    timeline.append(box);
  }

  function setStatus(status) {
    const holder = document.getElementById("session-status");
    if (!holder) return;
    const badge = el("span", "badge status-" + status, status);
    badge.dataset.status = status;
    if (status === "running") badge.append(" ", el("span", "pulse"));
    holder.replaceChildren(badge);
  }

  // -- a failed session's error, on the last turn shown (render.py: failure_note) ------------
  function failureNote(record) {
    const box = el("div", "kv-failure");
    box.setAttribute("role", "alert");
    box.id = "r" + record.seq;
    box.append(seqLink(record), tag("tag-failed", "failed here"), " ", record.payload.reason || "");
    const error = record.payload.error;
    if (error) {
      const message = el("div", "kv-error-message");
      message.append(el("span", "mono", error.type), ": " + error.message);
      box.append(message);
    }
    return box;
  }

  // What a reader who may not read the session's status record is shown (turns.py:
  // withheld_failure_note); an admin narrowed to one participant gets a link to the Overview.
  function unexplainedFailure(container) {
    const box = el("div", "kv-failure");
    box.setAttribute("role", "alert");
    box.append(tag("tag-failed", "failed here"), " ");
    if (container.dataset.reasons === "withheld") {
      box.append(el("span", "kv-withheld",
        "the session failed in this turn; why is not shown to a participant"));
    } else {
      const link = el("a", "", "why it failed →");
      link.href = "/sessions/" + encodeURIComponent(container.dataset.live);
      box.append(link);
    }
    return box;
  }

  function placeFailure(timeline, box) {
    if (timeline.querySelector(".kv-failure")) return;
    const turns = timeline.querySelectorAll("section.turn");
    if (turns.length) {
      turns[turns.length - 1].append(box);
      return;
    }
    const empty = timeline.querySelector(".empty-turns");
    if (empty) empty.replaceChildren(box);
    else {
      const card = el("section", "card empty-turns");
      card.append(box);
      timeline.append(card);
    }
  }

  // -- the live banner and follow mode (live_view.py) -----------------------------------------
  const VERDICT_TEXT = { passed: "passed", failed: "not passed", none: "no verdict" };
  const TERMINAL = ["completed", "failed", "stopped", "interrupted"];

  function newestTurn(timeline) {
    const turns = timeline.querySelectorAll("section.turn");
    return turns.length ? turns[turns.length - 1] : null;
  }

  // The ended banner as the server draws it (it reads the scores): swapped in when the stream
  // could not tell the verdict.
  function serverBanner() {
    const url = new URL(window.location.href);
    url.searchParams.set("follow", "1");
    url.hash = "";
    fetch(url.href, { credentials: "same-origin", headers: { Accept: "text/html" } })
      .then((response) => (response.ok ? response.text() : null))
      .then((text) => {
        if (text === null) return;
        const fresh = new DOMParser().parseFromString(text, "text/html").getElementById("live-banner");
        const current = document.getElementById("live-banner");
        if (fresh && current && fresh.dataset.state === "ended") {
          current.replaceWith(document.importNode(fresh, true));
        }
      })
      .catch(() => {});
  }

  function Banner(banner, timeline) {
    const turn = document.getElementById("live-turn");
    const toggle = document.getElementById("live-follow");
    const versions = {};  // score version -> passed, as the stream brings them
    let following = banner.dataset.follow === "on";

    const setFollow = (on) => {
      following = on;
      banner.dataset.follow = on ? "on" : "off";
      if (toggle) {
        toggle.textContent = on ? "following · stop" : "follow";
        toggle.setAttribute("aria-pressed", on ? "true" : "false");
        const here = new URL(window.location.href);
        here.searchParams.delete("turn");
        if (on) here.searchParams.set("follow", "1");
        else here.searchParams.delete("follow");
        window.history.replaceState(null, "", here.pathname + here.search);
        const other = new URL(here.href);  // where the link goes without script
        if (on) other.searchParams.delete("follow");
        else other.searchParams.set("follow", "1");
        toggle.href = other.pathname + other.search;
      }
      if (on) reveal();
    };

    const reveal = () => {
      if (!following) return;
      const newest = newestTurn(timeline);
      (newest || timeline).scrollIntoView({ block: "end" });
    };

    if (toggle) {
      toggle.addEventListener("click", (event) => {
        event.preventDefault();
        setFollow(!following);
      });
      // Reading back up is a wish to stop following: the page no longer pulls the reader down.
      window.addEventListener("wheel", (event) => {
        if (following && event.deltaY < 0) setFollow(false);
      }, { passive: true });
      window.addEventListener("keydown", (event) => {
        if (following && ["ArrowUp", "PageUp", "Home"].includes(event.key)) setFollow(false);
      });
    }
    if (following) reveal();

    return {
      record(record) {
        if (record.kind === "score" && record.payload.passed !== undefined) {
          versions[record.payload.version] = record.payload.passed;
        }
        if (record.turn !== null && turn && record.turn > Number(turn.textContent)) {
          turn.textContent = String(record.turn);
        }
        if (record.turn !== null) reveal();
      },
      end(status) {
        let verdict = banner.dataset.verdict;
        if (verdict !== undefined) {
          const found = Object.keys(versions).sort()
            .map((version) => versions[version]).find((passed) => passed !== null);
          if (found !== undefined) verdict = found ? "passed" : "failed";
          else serverBanner();  // a stream narrowed to one participant carries no score
          banner.dataset.verdict = verdict;
        }
        banner.dataset.state = "ended";
        banner.dataset.follow = "off";
        banner.classList.add("ended");
        const text = el("span", "");
        text.id = "live-banner-text";
        const said = el("b", "", status);
        said.id = "live-status";
        const count = el("span", "", turn ? turn.textContent : "0");
        count.id = "live-turn";
        text.append(said, " at turn ", count);
        if (verdict !== undefined && VERDICT_TEXT[verdict]) text.append(" · " + VERDICT_TEXT[verdict]);
        banner.replaceChildren(text);
        reveal();
      },
    };
  }

  // -- a fragment of the page drawn again by the server as records commit ---------------------
  // A container with data-refresh="ID" (the Progression chart) fetches its own page again and
  // swaps in the element with that id: the server draws it, the script only moves it in.
  const REFRESH_GAP_MS = 1000;

  function Refresher(apply) {
    let busy = false;
    let again = false;
    const run = () => {
      if (busy) { again = true; return; }
      busy = true;
      fetch(window.location.href, { credentials: "same-origin", headers: { Accept: "text/html" } })
        .then((response) => (response.ok ? response.text() : null))
        .then((text) => {
          if (text !== null) apply(new DOMParser().parseFromString(text, "text/html"));
        })
        .catch(() => {})
        .finally(() => {
          window.setTimeout(() => {
            busy = false;
            if (again) { again = false; run(); }
          }, REFRESH_GAP_MS);
        });
    };
    return run;
  }

  function swapIn(fresh, id) {
    const found = fresh.getElementById(id);
    const current = document.getElementById(id);
    if (found && current) current.replaceWith(document.importNode(found, true));
  }

  function follow(container) {
    const session = container.dataset.live;
    const params = new URLSearchParams({ after: container.dataset.after || "-1" });
    if (container.dataset.participant) params.set("participant", container.dataset.participant);
    for (const kind of (container.dataset.kinds || "").split(" ").filter(Boolean)) {
      params.append("kind", kind);
    }
    const source = new EventSource("/api/sessions/" + encodeURIComponent(session) + "/events?" + params);
    const timeline = container.id === "timeline" ? container : null;
    const bannerNode = timeline ? document.getElementById("live-banner") : null;
    const banner = bannerNode ? Banner(bannerNode, timeline) : null;
    const fragment = container.dataset.refresh;
    const refresh = fragment ? Refresher((fresh) => swapIn(fresh, fragment)) : null;
    const note = el("div", "live-note");
    note.append(el("span", "pulse"), refresh
      ? "Live: redrawn as outcomes are recorded"
      : "Live: new records appear as they are recorded");
    if (banner) {  // the banner says what is live; the note says the stream is open
      note.replaceChildren("updating live");
      bannerNode.append(note);
    } else container.before(note);
    let failed = false;
    source.addEventListener("record", (event) => {
      const record = JSON.parse(event.data);
      if (record.kind === "session.status") setStatus(record.payload.status);
      if (timeline && record.kind === "session.status" && record.payload.status === "failed") {
        failed = true;
        placeFailure(timeline, failureNote(record));
      } else if (timeline && record.turn !== null) addToTurn(timeline, record);
      else if (timeline) addMarker(timeline, record);
      if (banner) banner.record(record);
      if (refresh) refresh();
    });
    source.addEventListener("end", (event) => {
      source.close();
      const end = JSON.parse(event.data);
      setStatus(end.status);
      if (timeline && end.status === "failed" && !failed) placeFailure(timeline, unexplainedFailure(container));
      if (banner) banner.end(end.status);
      note.replaceChildren("Session " + end.status + ".");
      note.classList.remove("live-note");
      note.classList.add("muted");
      if (refresh) refresh();
      else if (!timeline) window.location.reload();
    });
  }

  for (const container of document.querySelectorAll("[data-live]")) follow(container);

  // -- an experiment's page: cells, counts and status follow the experiment's stream --------
  // The page carries data-live-experiment (the id) and data-after (the store position it was
  // rendered at); experiment_pages.py renders the same markup this code updates.

  function badge(status) {
    const node = el("span", "badge status-" + status, status);
    node.dataset.status = status;
    if (status === "running") node.append(" ", el("span", "pulse"));
    return node;
  }

  function flash(node) {
    node.classList.remove("fresh");
    void node.offsetWidth; // restart the animation
    node.classList.add("fresh");
  }

  function recount(container) {
    const counts = {};
    const runs = container.querySelectorAll("a.run[data-session]");
    for (const run of runs) counts[run.dataset.status] = (counts[run.dataset.status] || 0) + 1;
    for (const node of container.querySelectorAll("[data-count]")) {
      const name = node.dataset.count;
      const n = name === "recorded" ? runs.length : counts[name] || 0;
      node.textContent = String(n);
      if (name !== "recorded") node.classList.toggle("zero", n === 0);
    }
    const bar = container.querySelector("#experiment-bar svg.bar");
    if (!bar) return;
    const total = Math.max(Number(bar.dataset.total) || 0, runs.length, 1);
    bar.setAttribute("viewBox", "0 0 " + total + " 1");
    let x = 0;
    for (const rect of bar.querySelectorAll("rect[data-status]")) {
      const n = counts[rect.dataset.status] || 0;
      rect.setAttribute("x", String(x));
      rect.setAttribute("width", String(n));
      const title = rect.querySelector("title");
      if (title) title.textContent = n + " " + rect.dataset.status;
      x += n;
    }
  }

  function cellFor(container, scenario, trial) {
    for (const cell of container.querySelectorAll("td.cell")) {
      if (cell.dataset.scenario === scenario && cell.dataset.trial === String(trial)) return cell;
    }
    return null;
  }

  function runFor(container, session) {
    for (const run of container.querySelectorAll("a.run[data-session]")) {
      if (run.dataset.session === session) return run;
    }
    return null;
  }

  // A session's verdict and turn count are drawn by the server: when a session ends (its score
  // commits before its status) the cells and the results card are fetched again and swapped
  // in; while sessions run, their "turn k/N" is refreshed every TURN_REFRESH_MS.
  const TURN_REFRESH_MS = 10000;

  function redrawRuns(container) {
    return Refresher((fresh) => {
      for (const found of fresh.querySelectorAll("a.run[data-session]")) {
        const run = runFor(container, found.dataset.session);
        if (!run || run.outerHTML === found.outerHTML) continue;
        const changed = run.dataset.verdict !== found.dataset.verdict;
        const copy = document.importNode(found, true);
        run.replaceWith(copy);
        if (changed) flash(copy);
      }
      swapIn(fresh, "results");
      recount(container);
    });
  }

  function followExperiment(container) {
    const experiment = container.dataset.liveExperiment;
    const redrawn = redrawRuns(container);
    const ticker = window.setInterval(() => {
      if (container.querySelector('a.run[data-status="running"]')) redrawn();
    }, TURN_REFRESH_MS);
    const params = new URLSearchParams({ after: container.dataset.after || "-1" });
    const source = new EventSource(
      "/api/experiments/" + encodeURIComponent(experiment) + "/events?" + params);
    const note = el("div", "live-note");
    note.append(el("span", "pulse"), "Live: sessions update as they start and end");
    const head = container.querySelector(".page-head");
    (head || container).append(note);
    // Something the page has no place for (a scenario or trial it did not list): redraw.
    const redraw = () => { source.close(); window.location.reload(); };
    source.addEventListener("session.created", (event) => {
      const data = JSON.parse(event.data);
      if (runFor(container, data.session_id)) return;
      const cell = cellFor(container, data.scenario_id, data.trial === null ? 0 : data.trial);
      if (!cell) return redraw();
      const pending = cell.querySelector(".run.pending");
      if (pending) pending.remove();
      const run = el("a", "run");
      run.href = "/sessions/" + encodeURIComponent(data.session_id);
      run.dataset.session = data.session_id;
      run.dataset.status = "created";
      run.title = data.session_id + " · trial " + data.trial;
      run.append(badge("created"), el("span", "run-id mono", "…" + data.session_id.slice(-6)));
      cell.append(run);
      flash(run);
      recount(container);
    });
    source.addEventListener("session.status", (event) => {
      const data = JSON.parse(event.data);
      const run = runFor(container, data.session_id);
      if (!run) return redraw();
      run.dataset.status = data.status;
      run.querySelector(".badge").replaceWith(badge(data.status));
      if (data.reason && !run.title.endsWith(data.reason)) run.title += " · " + data.reason;
      flash(run);
      recount(container);
      if (TERMINAL.includes(data.status)) redrawn();
    });
    source.addEventListener("experiment.status", (event) => {
      const holder = document.getElementById("experiment-status");
      if (holder) holder.replaceChildren(badge(JSON.parse(event.data).status));
    });
    source.addEventListener("end", (event) => {
      source.close();
      window.clearInterval(ticker);
      redrawn();
      const end = JSON.parse(event.data);
      const holder = document.getElementById("experiment-status");
      if (holder) holder.replaceChildren(badge(end.status));
      for (const pending of container.querySelectorAll(".run.pending")) {
        pending.textContent = "never ran";
      }
      note.replaceChildren("Experiment " + end.status + ".");
      note.classList.remove("live-note");
      note.classList.add("muted");
    });
  }

  for (const container of document.querySelectorAll("[data-live-experiment]")) {
    followExperiment(container);
  }
})();
