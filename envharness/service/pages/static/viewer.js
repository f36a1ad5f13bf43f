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
                    "action.executed": "result", "action.blocked": "result", cost: "attempted" };

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

  function cell(record) {
    const payload = record.payload;
    const box = el("div", "rec");
    box.id = "r" + record.seq;
    box.append(seqLink(record));
    switch (record.kind) {
      case "observation":
        box.append(renderValue(payload.observation));
        break;
      case "hint":
        box.className = "rec hint";
        box.append(tag("tag-hint", "hint"), " ", payload.text);
        break;
      case "action.attempted":
        box.append(renderValue(payload.action));
        if (payload.seconds !== null && payload.seconds !== undefined) {
          box.append(" ", el("span", "time", duration(payload.seconds)));
        }
        break;
      case "action.executed":
        box.className = "rec executed";
        box.append(tag("tag-ok", "executed"), " ", renderValue(payload.outcome));
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
    item.append(" ", renderValue(payload));
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

  function follow(container) {
    const session = container.dataset.live;
    const params = new URLSearchParams({ after: container.dataset.after || "-1" });
    if (container.dataset.participant) params.set("participant", container.dataset.participant);
    const source = new EventSource("/api/sessions/" + encodeURIComponent(session) + "/events?" + params);
    const note = el("div", "live-note");
    note.append(el("span", "pulse"), "Live: new records appear as they are recorded");
    container.before(note);
    const timeline = container.id === "timeline" ? container : null;
    source.addEventListener("record", (event) => {
      const record = JSON.parse(event.data);
      if (record.kind === "session.status") setStatus(record.payload.status);
      if (timeline && record.turn !== null) addToTurn(timeline, record);
      else if (timeline) addMarker(timeline, record);
    });
    source.addEventListener("end", (event) => {
      source.close();
      const end = JSON.parse(event.data);
      setStatus(end.status);
      note.replaceChildren("Session " + end.status + ".");
      note.classList.remove("live-note");
      note.classList.add("muted");
      if (!timeline) window.location.reload();
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

  function followExperiment(container) {
    const experiment = container.dataset.liveExperiment;
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
    });
    source.addEventListener("experiment.status", (event) => {
      const holder = document.getElementById("experiment-status");
      if (holder) holder.replaceChildren(badge(JSON.parse(event.data).status));
    });
    source.addEventListener("end", (event) => {
      source.close();
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
