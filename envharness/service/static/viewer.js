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
})();
