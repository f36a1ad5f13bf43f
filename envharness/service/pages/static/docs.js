// The API reference: renders /openapi.json and tries GET requests against this server.
// Self-contained (nothing is fetched from elsewhere); every value is set as text, not markup.
"use strict";

(function () {
  const root = document.getElementById("api-docs");
  if (!root) return;

  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function schemaText(schema) {
    if (!schema) return "";
    if (schema.$ref) return schema.$ref.split("/").pop();
    if (schema.title) return schema.title;
    if (schema.oneOf) return schema.oneOf.map(schemaText).join(" | ");
    if (schema.anyOf) return schema.anyOf.map(schemaText).join(" | ");
    if (schema.enum) return schema.enum.map((v) => JSON.stringify(v)).join(" | ");
    if (schema.type === "array") return schemaText(schema.items) + "[]";
    let text = schema.type || "any";
    const limits = [];
    if (schema.minimum !== undefined) limits.push("≥ " + schema.minimum);
    if (schema.maximum !== undefined) limits.push("≤ " + schema.maximum);
    if (limits.length) text += " (" + limits.join(", ") + ")";
    return text;
  }

  const tokenInput = el("input");
  tokenInput.type = "password";
  tokenInput.placeholder = "eht_… bearer token (optional: this browser's sign-in is used otherwise)";
  tokenInput.autocomplete = "off";
  const bar = el("div", "token-bar");
  bar.append(el("b", "", "Token"), tokenInput);

  async function send(method, path, values, output) {
    let url = path.replace(/\{(\w+)\}/g, (_, name) => encodeURIComponent(values.path[name] || ""));
    const query = new URLSearchParams();
    for (const [name, value] of Object.entries(values.query)) {
      if (value === "") continue;
      for (const part of value.split(",")) query.append(name, part.trim());
    }
    if ([...query].length) url += "?" + query;
    const headers = {};
    if (tokenInput.value.trim()) headers.Authorization = "Bearer " + tokenInput.value.trim();
    output.replaceChildren(el("p", "muted", method + " " + url + " …"));
    const controller = new AbortController();
    const timer = setTimeout(() => controller.abort(), 5000);
    let text = "";
    let status = "";
    try {
      const response = await fetch(url, { method, headers, credentials: "same-origin", signal: controller.signal });
      status = response.status + " " + (response.headers.get("content-type") || "");
      const reader = response.body.getReader();
      const decoder = new TextDecoder();
      while (text.length < 20000) {
        const { done, value } = await reader.read();
        if (done) break;
        text += decoder.decode(value, { stream: true });
      }
      reader.cancel().catch(() => {});
    } catch (error) {
      if (error.name !== "AbortError") text += "\n" + error;
      else text += "\n(stopped after 5 s: a live stream stays open)";
    } finally {
      clearTimeout(timer);
    }
    try {
      text = JSON.stringify(JSON.parse(text), null, 2);
    } catch (_) { /* not one JSON document: show as is */ }
    output.replaceChildren(el("p", "", status), el("pre", "json", text.slice(0, 20000)));
  }

  function operation(path, method, op) {
    const box = el("details", "card op");
    const summary = el("summary");
    summary.append(el("span", "method " + method, method.toUpperCase()), el("span", "path", path),
                   el("span", "summary", op.summary || ""));
    const roles = op["x-roles"] || [];
    summary.append(el("span", "roles", roles.length ? roles.join(" · ") : "no credential"));
    box.append(summary);
    const body = el("div", "body");
    if (op.description) body.append(el("p", "", op.description));
    const params = op.parameters || [];
    if (params.length) {
      const table = el("table", "table compact params");
      const head = el("tr");
      for (const name of ["Parameter", "In", "Type", "Description"]) head.append(el("th", "", name));
      const thead = el("thead");
      thead.append(head);
      const tbody = el("tbody");
      for (const p of params) {
        const row = el("tr");
        row.append(el("td", "mono", p.name + (p.required ? " *" : "")), el("td", "", p.in),
                   el("td", "mono", schemaText(p.schema)), el("td", "", p.description || ""));
        tbody.append(row);
      }
      table.append(thead, tbody);
      body.append(el("h3", "", "Parameters"), table);
    }
    if (op.requestBody) {
      const [media, content] = Object.entries(op.requestBody.content)[0];
      body.append(el("h3", "", "Body"), el("p", "mono", media + ": " + schemaText(content.schema)));
    }
    const responses = el("ul");
    for (const [status, response] of Object.entries(op.responses || {})) {
      const content = response.content ? Object.entries(response.content)[0] : null;
      const shape = content ? "  " + content[0] + " " + schemaText(content[1].schema) : "";
      responses.append(el("li", "", status + " " + (response.description || "") + shape));
      for (const [name, schema] of Object.entries(response["x-events"] || {})) {
        responses.append(el("li", "mono event", "event " + name + ": " + schemaText(schema)));
      }
    }
    body.append(el("h3", "", "Responses"), responses);
    if (method === "get") {
      const values = { path: {}, query: {} };
      const form = el("div", "try");
      for (const p of params.filter((p) => p.in === "path" || p.in === "query")) {
        const input = el("input");
        input.placeholder = p.in === "query" && p.schema && p.schema.type === "array" ? "a,b" : p.in;
        input.addEventListener("input", () => { values[p.in][p.name] = input.value; });
        form.append(el("label", "mono", p.name), input);
      }
      const button = el("button", "button", "Send GET");
      const output = el("div", "result");
      button.type = "button";
      button.addEventListener("click", () => send("GET", path, values, output));
      body.append(el("h3", "", "Try it"), form, button, output);
    }
    box.append(body);
    return box;
  }

  async function render() {
    const response = await fetch("/openapi.json", { credentials: "same-origin" });
    const doc = await response.json();
    root.replaceChildren(bar);
    const groups = {};
    for (const [path, methods] of Object.entries(doc.paths)) {
      for (const [method, op] of Object.entries(methods)) {
        const tag = (op.tags || ["other"])[0];
        (groups[tag] = groups[tag] || []).push(operation(path, method, op));
      }
    }
    for (const tag of ["sessions", "records", "meta", "tokens", "auth", "viewer"].concat(Object.keys(groups))) {
      if (!groups[tag]) continue;
      root.append(el("h2", "tag-group", tag), ...groups[tag]);
      delete groups[tag];
    }
    const schemas = el("details", "card raw");
    schemas.append(el("summary", "", "Schemas (" + Object.keys(doc.components.schemas).length + ")"));
    for (const [name, schema] of Object.entries(doc.components.schemas)) {
      schemas.append(el("h3", "", name), el("pre", "json", JSON.stringify(schema, null, 2)));
    }
    root.append(el("h2", "tag-group", "schemas"), schemas);
  }

  render().catch((error) => root.replaceChildren(el("p", "", "Could not load /openapi.json: " + error)));
})();
