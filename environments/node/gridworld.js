#!/usr/bin/env node
// A reference environment for envharness environment protocol v1 in Node.js (20 or later), with
// no dependencies: a tiny gridworld. Use it in a session as
// ProcessEnvironment(["node", "environments/node/gridworld.js"]).
//
// The rules: each participant ("walker") starts in the top-left corner of a square grid and
// walks one cell per turn ({"move": "north" | "south" | "east" | "west"}) toward the goal; a
// wall, placed from the seed, blocks one cell, and bumping into it or the edge wastes the turn.
// Every walker moves at once (turn_order "simultaneous"). The episode is done when a walker
// reaches the goal, and truncated — cut short, not finished — after max_steps turns. A step costs
// a reward of -0.1; reaching the goal earns +1. An unknown move is blocked (check_action).
//
// The scenario's input is {"size": 4, "goal": [3, 3], "max_steps": 12}, every field optional.
// The program is pure: every request carries the state it applies to.
//
// stdout carries protocol lines only; diagnostics go to stderr. It exits with status 0 after
// `shutdown` or at the end of its input (once its output is flushed), with 1 when the host
// offers no version it speaks.

const { createInterface } = require("node:readline");

const IMPLEMENTATION = "gridworld-node@1";
const MOVES = { north: [0, -1], south: [0, 1], east: [1, 0], west: [-1, 0] };

const SPEC = {
  name: "gridworld",
  version: "1",
  roles: ["walker"],
  turn_order: "simultaneous",
  invalid_actions: "block",
  input_schema: {
    type: "object",
    properties: {
      size: { type: "integer", minimum: 2 },
      goal: { type: "array", items: { type: "integer" }, minItems: 2, maxItems: 2 },
      max_steps: { type: "integer", minimum: 1 },
    },
  },
  action_schema: {
    type: "object",
    properties: { move: { enum: Object.keys(MOVES) } },
    required: ["move"],
  },
  scoring_version: "gridworld-score@1",
};
const CAPABILITIES = ["check_action", "render_text", "score"];

// process.stdout keeps the order of writes and flushes them before the process exits on its
// own; that is why this program never calls process.exit() while output may be pending.
function send(message) {
  process.stdout.write(JSON.stringify(message) + "\n");
}

// -- the rules: each takes the state it applies to and returns a new value ---------------------

function initialize(input, seed, roster) {
  const size = input?.size ?? 4;
  const goal = input?.goal ?? [size - 1, size - 1];
  const maxSteps = input?.max_steps ?? 3 * size;
  if (!Number.isInteger(size) || size < 2) throw new Error(`size must be an integer >= 2, got ${size}`);
  if (!inside(size, goal)) throw new Error(`goal ${JSON.stringify(goal)} is outside the ${size}x${size} grid`);
  // The wall: a cell drawn from the seed, never the start or the goal.
  const cells = size * size;
  let index = seed % cells;
  while (index === 0 || index === goal[1] * size + goal[0]) index = (index + 1) % cells;
  const positions = Object.fromEntries(Object.keys(roster).map((name) => [name, [0, 0]]));
  return { size, goal, wall: [index % size, Math.floor(index / size)], positions, steps: 0, max_steps: maxSteps };
}

const inside = (size, [x, y]) => Number.isInteger(x) && Number.isInteger(y) && x >= 0 && y >= 0 && x < size && y < size;
const same = (a, b) => a[0] === b[0] && a[1] === b[1];

function observe(state, participant) {
  return { position: state.positions[participant], goal: state.goal, size: state.size, steps: state.steps };
}

function checkAction(state, participant, action) {
  if (!(action.move in MOVES)) {
    return `move must be one of ${Object.keys(MOVES).join(", ")}, got ${JSON.stringify(action.move)}`;
  }
  return null;
}

function resolve(state, actions) {
  const positions = { ...state.positions };
  const outcomes = {};
  const rewards = {};
  let done = false;
  for (const [name, action] of Object.entries(actions)) {
    const [dx, dy] = MOVES[action.move];
    const [x, y] = positions[name];
    const next = [x + dx, y + dy];
    const moved = inside(state.size, next) && !same(next, state.wall);
    positions[name] = moved ? next : [x, y];
    const reached = same(positions[name], state.goal);
    done ||= reached;
    outcomes[name] = { position: positions[name], bumped: !moved, reached };
    rewards[name] = reached ? 1 : -0.1;
  }
  const steps = state.steps + 1;
  const after = { ...state, positions, steps };
  return {
    state: after,
    outcomes,
    rewards,
    done,
    truncated: !done && steps >= state.max_steps,
    signals: { steps },
  };
}

function intervene(state, intervention) {
  const goal = intervention.goal;
  if (!Array.isArray(goal) || !inside(state.size, goal) || same(goal, state.wall)) {
    throw new Error(`an intervention moves the goal to a free cell: {"goal": [x, y]}, got ${JSON.stringify(intervention)}`);
  }
  return { ...state, goal };
}

// The grid as text, with the goal in green (ANSI colours are allowed in a text view).
function renderText(state, participant) {
  const rows = [];
  for (let y = 0; y < state.size; y++) {
    let row = "";
    for (let x = 0; x < state.size; x++) {
      const cell = [x, y];
      if (same(cell, state.positions[participant])) row += "@";
      else if (same(cell, state.goal)) row += "\u001b[32mG\u001b[0m";
      else if (same(cell, state.wall)) row += "#";
      else row += ".";
    }
    rows.push(row);
  }
  return rows.join("\n");
}

function score(state, scenario) {
  const reached = Object.values(state.positions).some((p) => same(p, state.goal));
  return { metrics: { steps: state.steps, reached: reached ? 1 : 0 }, passed: reached };
}

const RULES = {
  initialize: (m) => initialize(m.input, m.seed, m.roster),
  observe: (m) => observe(m.state, m.participant),
  check_action: (m) => checkAction(m.state, m.participant, m.action),
  resolve: (m) => resolve(m.state, m.actions),
  intervene: (m) => intervene(m.state, m.intervention),
  render_text: (m) => renderText(m.state, m.participant),
  score: (m) => score(m.state, m.scenario),
};

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
  if (message.type === "hello") {
    if (!Array.isArray(message.protocols) || !message.protocols.includes(1)) {
      send({ type: "error", message: "this program speaks protocol version 1 only" });
      finish(1);
      return;
    }
    send({ type: "ready", protocol: 1, implementation: IMPLEMENTATION, spec: SPEC, capabilities: CAPABILITIES });
  } else if (message.type === "shutdown") {
    finish(0);
  } else if (message.type in RULES) {
    let value;
    try {
      value = RULES[message.type](message);
    } catch (error) {
      send({ type: "error", id: message.id, message: `${message.type}: ${error.message}` });
      return;
    }
    send({ type: "result", id: message.id, value: value ?? null });
  } else if ("id" in message) {
    // A request this version does not know: say so, do not stall.
    send({ type: "error", id: message.id, message: `unknown request ${JSON.stringify(message.type)}` });
  }
});
