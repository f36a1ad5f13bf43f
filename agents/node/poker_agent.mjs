#!/usr/bin/env node
// A limit hold'em player for envharness protocol v1 in Node.js (20 or later), with no dependencies.
//
// It plays PettingZoo's texas_holdem_v4 (and leduc_holdem_v4) through
// envharness.adapters.pettingzoo.PettingZooEnvironment, as in examples/pettingzoo_poker.py:
//
//   CommandAgent(["node", "agents/node/poker_agent.mjs"], implementation="poker-agent-node@1")
//
// What it is shown (its own cards only; the adapter never shows another player's hand):
//   {"observation": [72 numbers], "action_mask": [1, 1, 1, 0], "legal_actions": [0, 1, 2], ...}
// The first 52 numbers mark the cards it can see (its hand and the board), one per card, in
// suits S, H, D, C and ranks A 2 3 ... K; actions are 0 call, 1 raise, 2 fold, 3 check.
// Leduc hold'em shows fewer numbers; the same rule reads them as far as they go.
//
// Its rule: raise with a pair or a high card (queen or better) in sight, otherwise check when it
// can and call when it cannot. It never folds. It chooses only among legal_actions, so it is never
// blocked, and it decides by the observation alone, so a fresh process in a branch plays as the
// original did.
//
// It also hears what happened to it. After its own moves the feedback has `status` "executed".
// When the other player's move ends the hand, the feedback has `status` "outcome" (protocol
// v1: an outcome for a participant that did not act), with its final reward. It logs both.
//
// stdout carries protocol lines only; it exits with status 0 after `shutdown` or at the end of its
// input, and with 1 when the host offers no version it speaks.

import { createInterface } from "node:readline";

const IMPLEMENTATION = "poker-agent-node@1";
const CALL = 0;
const RAISE = 1;
const CHECK = 3;
const HIGH = new Set([0, 11, 12]); // ace, queen, king (rank index within a suit)

function send(message) {
  process.stdout.write(JSON.stringify(message) + "\n");
}

function log(message, level = "info") {
  send({ type: "log", level, message });
}

// The ranks of the cards in sight, from the 52 card flags (fewer for a smaller deck).
function ranksInSight(cards) {
  const ranks = [];
  cards.slice(0, 52).forEach((seen, index) => {
    if (seen === 1) ranks.push(index % 13);
  });
  return ranks;
}

function decide(observation) {
  const legal = Array.isArray(observation?.legal_actions) ? observation.legal_actions : [CALL];
  const cards = Array.isArray(observation?.observation) ? observation.observation : [];
  const ranks = ranksInSight(cards);
  const pair = new Set(ranks).size < ranks.length;
  const strong = pair || ranks.some((rank) => HIGH.has(rank));
  for (const wanted of strong ? [RAISE, CALL, CHECK] : [CHECK, CALL]) {
    if (legal.includes(wanted)) return { action: wanted };
  }
  return { action: legal[0] };
}

let hands = { acts: 0, reward: 0 };
const lines = createInterface({ input: process.stdin, crlfDelay: Infinity, terminal: false });

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
      send({ type: "ready", protocol: 1, implementation: IMPLEMENTATION, capabilities: [] });
      break;
    case "act": {
      hands.acts += 1;
      const action = decide(message.observation);
      log(`turn ${message.turn}: ${JSON.stringify(action)}`, "debug");
      send({ type: "action", id: message.id, action });
      break;
    }
    case "feedback": {
      const reward = message.outcome?.reward;
      if (typeof reward === "number") hands.reward += reward;
      if (message.status === "outcome") {
        log(`turn ${message.turn}: the other player's move ended it; my reward ${reward}`);
      } else if (message.status === "blocked") {
        log(`turn ${message.turn}: blocked: ${message.reason}`, "warning");
      }
      break;
    }
    case "shutdown":
      log(`bye after ${hands.acts} moves, reward ${hands.reward}`);
      finish(0);
      break;
    default:
      if (typeof message.id === "string") {
        send({ type: "error", id: message.id, message: `unknown request ${JSON.stringify(message.type)}` });
      } else {
        log(`ignored a message of unknown type ${JSON.stringify(message.type)}`, "warning");
      }
  }
});

lines.on("close", () => {
  if (process.exitCode === undefined) process.exitCode = 0;
});

process.stdout.on("error", () => process.exit(0));
