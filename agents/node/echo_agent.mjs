#!/usr/bin/env node
// A reference agent for envharness protocol v1 in Node.js (20 or later), with no dependencies.
//
// Run it with `envharness protocol check -- node agents/node/echo_agent.mjs`, or in a session as
// CommandAgent(["node", "agents/node/echo_agent.mjs"], implementation="echo@1").
//
// Its policy suits envharness.fixtures.SyntheticEnvironment: step the observed `total` one unit
// toward `target` (toward 0 when there is none); any other observation gets {"value": 0}. It is
// deterministic, so its small state (acts answered, feedback received) is all a snapshot needs.
//
// stdout carries protocol lines only; diagnostics go to stderr (one line after the handshake) or
// travel as `log` messages. It exits with status 0 after `shutdown` or at the end of its input
// (once its output is flushed), with 1 when the host offers no version it speaks. SIGTERM ends
// it at once (Node's default).

import { createInterface } from "node:readline";

const IMPLEMENTATION = "echo-agent-node@1";

// process.stdout keeps the order of writes and flushes them before the process exits on its
// own; that is why this agent never calls process.exit() while output may be pending.
function send(message) {
  process.stdout.write(JSON.stringify(message) + "\n");
}

function log(message, level = "info") {
  send({ type: "log", level, message });
}

const isInteger = (value) => Number.isInteger(value);

// One unit toward the target (or toward 0): the SyntheticEnvironment policy.
function decide(observation) {
  if (observation === null || typeof observation !== "object" || Array.isArray(observation)) {
    return { value: 0 };
  }
  const { total, target } = observation;
  if (!isInteger(total)) return { value: 0 };
  const goal = isInteger(target) ? target : 0;
  return { value: Math.sign(goal - total) || 0 };
}

let state = { acts: 0, feedback: 0 };
// crlfDelay: a "\r\n" ending is one line end, never an empty line after it.
const lines = createInterface({ input: process.stdin, crlfDelay: Infinity, terminal: false });

// Stop reading and let the process end once its last lines are written.
function finish(status) {
  process.exitCode = status;
  lines.close();
  process.stdin.destroy();
}

lines.on("line", (line) => {
  if (line.trim() === "") return;
  const message = JSON.parse(line);
  switch (message.type) {
    case "hello":
      if (!Array.isArray(message.protocols) || !message.protocols.includes(1)) {
        send({ type: "error", message: "this agent speaks protocol version 1 only" });
        finish(1);
        return;
      }
      process.stderr.write(`echo agent: ${message.participant} (seed ${message.seed})\n`);
      send({ type: "ready", protocol: 1, implementation: IMPLEMENTATION, capabilities: ["snapshot"] });
      break;
    case "act": {
      state.acts += 1;
      const action = decide(message.observation);
      log(`turn ${message.turn}: ${JSON.stringify(action)}`, "debug");
      send({ type: "action", id: message.id, action });
      break;
    }
    case "feedback":
      state.feedback += 1; // counted, never answered
      break;
    case "snapshot":
      send({ type: "state", id: message.id, state: { ...state } });
      break;
    case "restore": {
      const restored = message.state;
      if (restored === null || typeof restored !== "object") {
        send({ type: "error", id: message.id, message: "not a state of mine" });
        finish(1);
        return;
      }
      state = { acts: restored.acts ?? 0, feedback: restored.feedback ?? 0 };
      send({ type: "restored", id: message.id });
      break;
    }
    case "shutdown":
      log(`bye after ${state.acts} acts`);
      finish(0);
      break;
    default:
      // A request this version does not know: say so rather than stall; anything else is ignored.
      if (typeof message.id === "string") {
        send({ type: "error", id: message.id, message: `unknown request ${JSON.stringify(message.type)}` });
      } else {
        log(`ignored a message of unknown type ${JSON.stringify(message.type)}`, "warning");
      }
  }
});

// The end of input means the same as shutdown.
lines.on("close", () => {
  if (process.exitCode === undefined) process.exitCode = 0;
});

// The host went away: nobody is left to tell.
process.stdout.on("error", () => process.exit(0));
