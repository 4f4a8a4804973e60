// The Switchyard console: streams chat turns from POST /api/v1/chat/stream (Server-Sent Events
// read with fetch, since EventSource cannot POST) and draws GET /api/v1/chat/stats as hand-made
// SVG charts. The role view lists each role (GET /api/context/roles) with the tools it may use
// under the MCP gateway's policies (POST /api/mcp/policies/query, one subject per role). No
// dependencies and no build step: the edge serves this file as it is.

const API = {
  stream: "/api/v1/chat/stream",
  stats: "/api/v1/chat/stats",
  feedback: "/api/v1/chat/feedback",
  roles: "/api/context/roles",
  policies: "/api/mcp/policies/query",
};
const KEY_STORAGE = "switchyard.console.api-key";
const SVG_NS = "http://www.w3.org/2000/svg";

const ROUTES = {
  ROUTE_TYPE_DIRECT: { slug: "direct", label: "Direct" },
  ROUTE_TYPE_MCP_AGENT: { slug: "mcp-agent", label: "MCP agent" },
  ROUTE_TYPE_MULTIAGENT: { slug: "multiagent", label: "Multi-agent" },
};

const $ = (selector, root = document) => root.querySelector(selector);

const state = {
  sessionId: "",
  controller: null, // the AbortController of the turn in flight
  stats: null, // the last GetRoutingStatsResponse, redrawn on resize
  statsRequest: 0,
  rolesRequest: 0,
};

// ---------------------------------------------------------------------------------------------
// Small helpers

function routeInfo(routeType) {
  if (ROUTES[routeType]) return ROUTES[routeType];
  const name = String(routeType || "ROUTE_TYPE_UNSPECIFIED").replace(/^ROUTE_TYPE_/, "");
  return { slug: name.toLowerCase().replace(/_/g, "-"), label: name.toLowerCase().replace(/_/g, " ") };
}

// uint64 values arrive as JSON strings; absent or malformed ones count as zero.
function num(value) {
  const n = Number(value);
  return Number.isFinite(n) ? n : 0;
}

function formatMs(ms) {
  const n = num(ms);
  if (n >= 10000) return `${(n / 1000).toFixed(1)} s`;
  if (n >= 1000) return `${(n / 1000).toFixed(2)} s`;
  if (n >= 100 || Number.isInteger(n)) return `${Math.round(n)} ms`;
  return `${n.toFixed(1)} ms`;
}

function formatPercent(rate) {
  const p = num(rate) * 100;
  if (p === 0 || p >= 10) return `${Math.round(p)}%`;
  return `${p.toFixed(1)}%`;
}

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (name === "class") node.className = value;
    else if (name === "text") node.textContent = value;
    else node.setAttribute(name, value === true ? "" : String(value));
  }
  node.append(...children.filter((c) => c !== undefined && c !== null && c !== false));
  return node;
}

function svg(tag, attrs = {}, text) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value !== undefined && value !== null) node.setAttribute(name, String(value));
  }
  if (text !== undefined) node.textContent = text;
  return node;
}

function apiKey() {
  try {
    return localStorage.getItem(KEY_STORAGE) || "";
  } catch {
    return "";
  }
}

function headers(extra = {}) {
  const h = { accept: "application/json", ...extra };
  const key = apiKey();
  if (key) h.authorization = `Bearer ${key}`;
  return h;
}

// The message of an `{"error": {...}}` body, or a plain description of the response.
async function errorMessage(response) {
  const text = await response.text().catch(() => "");
  const hint = response.status === 401 ? " — set an API key in Settings" : "";
  try {
    const body = JSON.parse(text);
    const error = body.error || body;
    if (error && error.message) {
      return `${error.message}${error.status ? ` (${error.status})` : ""}${hint}`;
    }
  } catch {
    // not JSON: fall through to the raw text
  }
  return `${response.status} ${response.statusText || "error"}${text ? `: ${text.slice(0, 200)}` : ""}${hint}`;
}

function setStatus(message, tone = "") {
  const status = $("#status");
  status.textContent = message;
  status.dataset.tone = tone;
}

function setSession(id) {
  state.sessionId = id || "";
  const code = $("#session-id");
  code.textContent = state.sessionId ? shortId(state.sessionId) : "new";
  code.title = state.sessionId || "No session yet: the first message starts one";
  code.dataset.sessionId = state.sessionId;
}

function shortId(id) {
  return id.length > 14 ? `${id.slice(0, 8)}…${id.slice(-4)}` : id;
}

// ---------------------------------------------------------------------------------------------
// Server-Sent Events over fetch

// Yields {event, data} for each event of an SSE body; `data` is the joined data lines.
async function* readEvents(body) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  const parse = (block) => {
    let event = "message";
    const data = [];
    for (const line of block.split(/\r\n|\r|\n/)) {
      if (!line || line.startsWith(":")) continue;
      const colon = line.indexOf(":");
      const field = colon < 0 ? line : line.slice(0, colon);
      let value = colon < 0 ? "" : line.slice(colon + 1);
      if (value.startsWith(" ")) value = value.slice(1);
      if (field === "event") event = value;
      else if (field === "data") data.push(value);
    }
    return data.length ? { event, data: data.join("\n") } : null;
  };
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += value;
    let boundary;
    while ((boundary = buffer.search(/\r\n\r\n|\n\n|\r\r/)) >= 0) {
      const block = buffer.slice(0, boundary);
      buffer = buffer.slice(boundary).replace(/^(\r\n\r\n|\n\n|\r\r)/, "");
      const parsed = parse(block);
      if (parsed) yield parsed;
    }
  }
  const rest = parse(buffer);
  if (rest) yield rest;
}

// ---------------------------------------------------------------------------------------------
// One chat turn

class Turn {
  constructor(message) {
    this.started = performance.now();
    this.firstToken = null;
    this.tools = [];
    this.toolsUsed = new Set();
    this.responseId = "";
    this.routeType = "";

    this.badge = el("span", { class: "badge route-badge pending", text: "Routing…" });
    this.role = el("span", { class: "role", text: "" });
    this.answer = el("div", {
      class: "answer",
      "aria-live": "polite",
      "aria-busy": "true",
      "aria-label": "Answer",
    });
    this.cursor = el("span", { class: "cursor", "aria-hidden": "true" });
    this.answerText = document.createTextNode("");
    this.answer.append(this.answerText, this.cursor);
    this.toolList = el("ul", { class: "tools", "aria-label": "Tools used", hidden: true });
    this.figures = el("dl", { class: "figures" });
    this.notes = el("ul", { class: "notes", hidden: true });
    this.reasoning = el("p", { class: "reasoning", hidden: true });
    this.footer = el("div", { class: "turn-footer" });

    this.node = el(
      "article",
      { class: "turn", "data-state": "streaming", "data-route": "", "data-role": "" },
      el("p", { class: "question" }, el("span", { class: "visually-hidden", text: "You: " }), message),
      el("div", { class: "turn-head" }, this.badge, this.role),
      this.reasoning,
      this.answer,
      this.toolList,
      this.notes,
      this.footer,
    );
    this.footer.append(this.figures);
    this.renderFigures();
  }

  appendText(text) {
    if (!text) return;
    if (this.firstToken === null) {
      this.firstToken = performance.now() - this.started;
      this.renderFigures();
    }
    this.answerText.appendData(text);
  }

  onRoute(route) {
    const metadata = route.metadata || {};
    if (route.session_id) setSession(route.session_id);
    if (route.id) this.responseId = route.id;
    // A second decision replaces the first; what was streamed before it was a preamble.
    if (this.routeType && this.answerText.data) {
      const preamble = el("p", { class: "preamble" });
      preamble.append(
        el("span", { class: "preamble-label", text: `Before re-routing (${routeInfo(this.routeType).label}): ` }),
        this.answerText.data,
      );
      this.answer.before(preamble);
      this.answerText.data = "";
    }
    this.applyMetadata(metadata);
  }

  applyMetadata(metadata) {
    this.metadata = { ...this.metadata, ...metadata };
    const m = this.metadata;
    const info = routeInfo(m.route_type);
    this.routeType = m.route_type || this.routeType;
    this.node.dataset.route = info.slug;
    this.badge.className = `badge route-badge route-${info.slug}`;
    this.badge.textContent = info.label;
    this.badge.title = `Route: ${info.label}`;

    this.node.dataset.role = m.role_id || "";
    this.role.replaceChildren();
    this.role.classList.toggle("switched", Boolean(m.role_switched));
    if (m.role_switched && m.previous_role_id) {
      this.role.append(
        el("span", { class: "visually-hidden", text: "Role switched from " }),
        el("span", { class: "role-prev", text: m.previous_role_id }),
        el("span", { class: "arrow", "aria-hidden": "true", text: " → " }),
        el("span", { class: "visually-hidden", text: " to " }),
        el("span", { class: "role-id", text: m.role_id || "none" }),
      );
      this.role.title = "The session's expert role switched on this turn";
    } else if (m.role_id) {
      this.role.append(el("span", { class: "visually-hidden", text: "Role " }), el("span", { class: "role-id", text: m.role_id }));
      this.role.title = "Expert role";
    }
    if (Array.isArray(m.expert_role_ids) && m.expert_role_ids.length) {
      const domains = Array.isArray(m.domains) ? m.domains : [];
      const experts = m.expert_role_ids.map((r, i) => (domains[i] ? `${r} (${domains[i]})` : r));
      this.role.append(el("span", { class: "experts", text: ` · experts: ${experts.join(", ")}` }));
    } else if (Array.isArray(m.domains) && m.domains.length) {
      this.role.append(el("span", { class: "experts", text: ` · domains: ${m.domains.join(", ")}` }));
    }

    if (m.reasoning) {
      this.reasoning.hidden = false;
      this.reasoning.textContent = m.reasoning;
    }
    for (const tool of m.tools_used || []) this.addUsedTool(tool);
    this.renderNotes();
    this.renderFigures();
  }

  // A tool named in metadata that no `tool` event announced.
  addUsedTool(name) {
    if (this.tools.some((t) => t.tool === name)) return;
    this.onTool({ tool: name, finished: true, fromMetadata: true });
  }

  onTool(activity) {
    let entry = activity.finished
      ? this.tools.find((t) => t.tool === activity.tool && !t.finished)
      : undefined;
    if (!entry) {
      entry = { tool: activity.tool, node: el("li", { class: "tool" }) };
      this.tools.push(entry);
      this.toolList.append(entry.node);
      this.toolList.hidden = false;
    }
    Object.assign(entry, activity);
    const { node } = entry;
    node.dataset.tool = entry.tool;
    node.dataset.state = !entry.finished ? "running" : entry.is_error ? "error" : "ok";
    const [server, name] = splitTool(entry.tool, entry.server);
    node.replaceChildren(
      el("span", { class: "tool-dot", "aria-hidden": "true" }),
      el("span", { class: "tool-name" }, server ? el("span", { class: "tool-server", text: `${server} · ` }) : "", name),
      el("span", {
        class: "tool-time",
        text: !entry.finished ? "running…" : entry.fromMetadata ? "" : formatMs(entry.duration_ms),
      }),
      entry.is_error ? el("span", { class: "tool-error", text: entry.error || "failed" }) : "",
    );
  }

  onCompleted(completed) {
    this.completed = true;
    if (completed.metadata) this.applyMetadata(completed.metadata);
    this.model = completed.model || "";
    this.usage = completed.usage || null;
    this.finishReason = completed.finish_reason || "";
    this.finish("done");
  }

  onError(message) {
    this.footer.before(el("p", { class: "turn-error", role: "alert", text: message }));
    this.finish("error");
  }

  finish(outcome) {
    if (this.node.dataset.state !== "streaming") return;
    this.total = performance.now() - this.started;
    this.node.dataset.state = outcome;
    this.answer.setAttribute("aria-busy", "false");
    this.cursor.remove();
    if (this.badge.classList.contains("pending")) {
      this.badge.className = "badge route-badge route-none";
      this.badge.textContent = "Not routed";
    }
    for (const t of this.tools) {
      if (!t.finished) this.onTool({ ...t, finished: true, duration_ms: "" });
    }
    if (outcome === "done" && !this.answerText.data) {
      this.answer.classList.add("no-text");
      this.answerText.data = "(no text in the answer)";
    }
    if (outcome !== "done" && !this.answerText.data) this.answer.hidden = true;
    this.renderFigures();
    if (outcome === "done" && this.responseId) this.footer.append(this.feedbackControls());
  }

  renderNotes() {
    const m = this.metadata || {};
    const notes = [];
    if (m.cache_hit) notes.push(["cache", "Routing decision served from the cache"]);
    if (m.fallback_used) notes.push(["fallback", "The fast fallback router decided (the LLM router failed or timed out)"]);
    if (num(m.attempts) > 1) notes.push(["retry", `${m.attempts} routing attempts`]);
    if (num(m.model_fallbacks) > 0) {
      notes.push(["fallback", `${m.model_fallbacks} model call${num(m.model_fallbacks) > 1 ? "s" : ""} failed over to the next model`]);
    }
    for (const line of m.degraded || []) notes.push(["degraded", `Degraded: ${line}`]);
    this.notes.replaceChildren(...notes.map(([kind, text]) => el("li", { class: `note note-${kind}`, text })));
    this.notes.hidden = notes.length === 0;
  }

  renderFigures() {
    const m = this.metadata || {};
    const streaming = this.node.dataset.state === "streaming";
    const figures = [];
    if (m.routing_time_ms !== undefined || streaming) {
      figures.push(["Routing", m.routing_time_ms !== undefined ? formatMs(m.routing_time_ms) : "…", "routing"]);
    }
    if (this.firstToken !== null || streaming) {
      figures.push(["First token", this.firstToken !== null ? formatMs(this.firstToken) : "…", "ttft"]);
    }
    // The execution time is final only in the completed event's metadata.
    if (this.completed && m.execution_time_ms !== undefined) {
      figures.push(["Execution", formatMs(m.execution_time_ms), "execution"]);
    }
    if (!streaming) figures.push(["Total", formatMs(this.total), "total"]);
    if (m.routing_model) figures.push(["Router", m.routing_model, "routing-model"]);
    if (this.model) figures.push(["Model", this.model, "model"]);
    if (this.usage) figures.push(["Tokens", `${num(this.usage.prompt_tokens)} in · ${num(this.usage.completion_tokens)} out`, "tokens"]);
    if (this.finishReason && this.finishReason !== "stop") figures.push(["Finish", this.finishReason, "finish"]);
    this.figures.replaceChildren(
      ...figures.map(([name, value, key]) => el("div", { class: "figure", "data-figure": key }, el("dt", { text: name }), el("dd", { text: value }))),
    );
  }

  // Helpful / not helpful, and for the latter which route would have been right (the false
  // routing rate counts those).
  feedbackControls() {
    const group = el("div", { class: "feedback", role: "group", "aria-label": "Was this answer helpful?" });
    const button = (text, onClick) => {
      const b = el("button", { type: "button", class: "button small ghost", text });
      b.addEventListener("click", onClick);
      return b;
    };
    const send = async (body) => {
      for (const control of group.querySelectorAll("button, select")) control.disabled = true;
      try {
        const response = await fetch(API.feedback, {
          method: "POST",
          headers: headers({ "content-type": "application/json" }),
          body: JSON.stringify({ response_id: this.responseId, ...body }),
        });
        if (!response.ok) throw new Error(await errorMessage(response));
        group.replaceChildren(el("span", { class: "feedback-done", text: "Thanks, feedback recorded" }));
        refreshStats();
      } catch (error) {
        for (const control of group.querySelectorAll("button, select")) control.disabled = false;
        setStatus(`Feedback not recorded: ${error.message}`, "error");
      }
    };
    const askRoute = () => {
      const route = el("select", { class: "small", "aria-label": "The route that would have been right" });
      route.append(el("option", { value: "", text: "The route was right" }));
      for (const [type, info] of Object.entries(ROUTES)) {
        if (type !== this.routeType) route.append(el("option", { value: type, text: `Should be ${info.label}` }));
      }
      group.replaceChildren(
        route,
        button("Send", () => send(route.value ? { helpful: false, expected_route: route.value } : { helpful: false })),
        button("Cancel", () => group.replaceChildren(...initial())),
      );
      route.focus();
    };
    const initial = () => [
      el("span", { class: "feedback-label", text: "Helpful?" }),
      button("Yes", () => send({ helpful: true })),
      button("No", askRoute),
    ];
    group.append(...initial());
    return group;
  }
}

function splitTool(tool, server) {
  const name = String(tool || "");
  if (server && name.startsWith(`${server}__`)) return [server, name.slice(server.length + 2)];
  const at = name.indexOf("__");
  if (at > 0) return [name.slice(0, at), name.slice(at + 2)];
  return [server || "", name];
}

async function sendMessage(message) {
  const turns = $("#turns");
  $("#chat-empty")?.remove();
  const turn = new Turn(message);
  turns.append(turn.node);
  turn.node.scrollIntoView({ block: "end" });

  const controller = new AbortController();
  state.controller = controller;
  setBusy(true);
  setStatus("Streaming…");

  const body = { message };
  if (state.sessionId) body.session_id = state.sessionId;
  const forceRoute = $("#force-route").value;
  if (forceRoute) body.force_route = forceRoute;

  try {
    const response = await fetch(API.stream, {
      method: "POST",
      headers: headers({ "content-type": "application/json", accept: "text/event-stream" }),
      body: JSON.stringify(body),
      signal: controller.signal,
    });
    if (!response.ok) throw new Error(await errorMessage(response));
    if (!response.body) throw new Error("the response has no body to stream");

    const stick = () => {
      const nearBottom = turns.scrollHeight - turns.scrollTop - turns.clientHeight < 80;
      return () => { if (nearBottom) turns.scrollTop = turns.scrollHeight; };
    };
    for await (const { event, data } of readEvents(response.body)) {
      if (!["route", "delta", "tool", "completed", "error"].includes(event)) continue;
      let payload;
      try {
        payload = JSON.parse(data);
      } catch {
        throw new Error(`the server sent an unreadable ${event} event`);
      }
      const scroll = stick();
      if (event === "route") turn.onRoute(payload);
      else if (event === "delta") turn.appendText(payload.content || "");
      else if (event === "tool") turn.onTool(payload);
      else if (event === "completed") turn.onCompleted(payload);
      else if (event === "error") {
        const error = payload.error || payload;
        turn.onError(error.message || "the stream failed");
      }
      scroll();
    }
    if (turn.node.dataset.state === "streaming") turn.onError("The stream ended before the answer completed");
    setStatus(turn.node.dataset.state === "done" ? "" : "The turn failed", turn.node.dataset.state === "done" ? "" : "error");
  } catch (error) {
    if (error.name === "AbortError") {
      turn.onError("Stopped");
      setStatus("Stopped");
    } else {
      const message = error instanceof TypeError ? `Could not reach the edge: ${error.message}` : error.message;
      turn.onError(message);
      setStatus(message, "error");
    }
  } finally {
    state.controller = null;
    setBusy(false);
    refreshStats();
  }
}

function setBusy(busy) {
  $("#send").disabled = busy;
  $("#stop").hidden = !busy;
  $("#chat-form").setAttribute("aria-busy", String(busy));
}

// ---------------------------------------------------------------------------------------------
// Routing analytics

async function refreshStats() {
  const request = ++state.statsRequest;
  const charts = $("#charts");
  charts.setAttribute("aria-busy", "true");
  const hours = Number($("#stats-window").value) || 24;
  const url = new URL(API.stats, location.href);
  // The server's default window is the last 24 hours: only other windows are sent.
  if (hours !== 24) url.searchParams.set("since", new Date(Date.now() - hours * 3600e3).toISOString());
  try {
    const response = await fetch(url, { headers: headers() });
    if (!response.ok) throw new Error(await errorMessage(response));
    const stats = await response.json();
    if (request !== state.statsRequest) return;
    state.stats = stats;
    renderStats(stats);
  } catch (error) {
    if (request !== state.statsRequest) return;
    charts.dataset.state = "error";
    $("#stats-message").textContent = `Could not load routing stats: ${error.message}`;
  } finally {
    if (request === state.statsRequest) charts.setAttribute("aria-busy", "false");
  }
}

function renderStats(stats) {
  const total = num(stats.total);
  const totalNode = $("#stats-total");
  totalNode.textContent = total.toLocaleString();
  totalNode.dataset.value = String(total);
  $("#stats-exec-p50").textContent = total ? formatMs(stats.execution_time_p50_ms) : "–";
  $("#stats-exec-p95").textContent = total ? formatMs(stats.execution_time_p95_ms) : "–";
  $("#stats-feedback").textContent = num(stats.feedback_count).toLocaleString();
  $("#stats-cost").textContent = total ? formatUsd(stats.cost_usd) : "–";
  $("#stats-cost-note").textContent = total ? costNote(stats) : "";

  const fmt = (t) => (t ? new Date(t).toLocaleString([], { dateStyle: "medium", timeStyle: "short" }) : "");
  $("#stats-window-label").textContent =
    stats.since && stats.until ? `${fmt(stats.since)} – ${fmt(stats.until)} · updated ${new Date().toLocaleTimeString()}` : "";

  const charts = $("#charts");
  if (total === 0) {
    charts.dataset.state = "empty";
    $("#stats-message").textContent = "No routing decisions in this window yet. Send a message and they appear here.";
    for (const slot of charts.querySelectorAll("[data-slot]")) slot.replaceChildren();
    return;
  }
  charts.dataset.state = "ready";
  $("#stats-message").textContent = "";
  drawCharts();
}

function drawCharts() {
  const stats = state.stats;
  if (!stats || num(stats.total) === 0) return;
  const slot = (name) => $(`#charts [data-slot="${name}"]`);
  const width = Math.max(240, Math.floor(slot("routes").clientWidth || 320));
  slot("routes").replaceChildren(routesChart(stats, width));
  slot("latency").replaceChildren(latencyChart(stats, width));
  slot("rates").replaceChildren(ratesChart(stats, width));
  slot("cost").replaceChildren(costChart(stats, width));
}

function formatUsd(value) {
  const n = num(value);
  if (n === 0) return "$0";
  if (n >= 100) return `$${n.toFixed(0)}`;
  if (n >= 1) return `$${n.toFixed(2)}`;
  return `$${n.toPrecision(2)}`;
}

// The costliest models and what the routing cache and the fast router saved.
function costNote(stats) {
  const models = (stats.models || []).slice(0, 3).map((m) => `${m.key} ${formatUsd(m.cost_usd)}`);
  const parts = [];
  if (models.length) parts.push(`By model: ${models.join(", ")}`);
  const avoided = num(stats.routing_calls_avoided);
  if (avoided) parts.push(`${avoided.toLocaleString()} routing calls avoided, saving ${formatUsd(stats.routing_savings_usd)}`);
  const unpriced = num(stats.unpriced_calls);
  if (unpriced) parts.push(`${unpriced.toLocaleString()} calls of unpriced models`);
  return parts.join(" · ");
}

// Horizontal bars, one per route: the mean cost of a turn, and the route's total.
function costChart(stats, width) {
  const rows = (stats.routes || []).map((r) => ({
    info: routeInfo(r.route_type),
    perTurn: num(r.cost_per_turn_usd),
    total: num(r.cost_usd),
  }));
  const rowHeight = 32;
  const labelWidth = 92;
  const valueWidth = 120;
  const height = Math.max(1, rows.length) * rowHeight + 2;
  const description = rows.map((row) => `${row.info.label}: ${formatUsd(row.perTurn)} per turn, ${formatUsd(row.total)} in all`).join("; ");
  const root = chartSvg("cost", width, height, "Cost per turn by route", description);
  const barSpace = Math.max(20, width - labelWidth - valueWidth);
  const max = Math.max(...rows.map((row) => row.perTurn), 1e-12);
  rows.forEach((row, i) => {
    const y = i * rowHeight + 4;
    root.append(svg("text", { x: 0, y: y + 12, class: "label" }, row.info.label));
    root.append(svg("text", { x: 0, y: y + 25, class: "sublabel" }, `${formatUsd(row.total)} in all`));
    root.append(svg("rect", { x: labelWidth, y: y + 2, width: barSpace, height: 12, rx: 6, class: "track" }));
    const w = row.perTurn > 0 ? Math.max(3, (row.perTurn / max) * barSpace) : 0;
    root.append(
      svg("rect", {
        x: labelWidth,
        y: y + 2,
        width: w.toFixed(1),
        height: 12,
        rx: 6,
        class: "bar",
        "data-route": row.info.slug,
        "data-value": row.perTurn,
      }),
    );
    root.append(svg("text", { x: width, y: y + 13, class: "value", "text-anchor": "end" }, formatUsd(row.perTurn)));
  });
  return root;
}

function chartSvg(name, width, height, title, description) {
  const id = `chart-${name}`;
  const root = svg("svg", {
    "data-chart": name,
    viewBox: `0 0 ${width} ${height}`,
    width,
    height,
    role: "img",
    "aria-labelledby": `${id}-title ${id}-desc`,
    class: "chart-svg",
  });
  root.append(svg("title", { id: `${id}-title` }, title), svg("desc", { id: `${id}-desc` }, description));
  return root;
}

// Horizontal bars, one per route: label, count and share.
function routesChart(stats, width) {
  const total = num(stats.total);
  const byType = new Map((stats.routes || []).map((r) => [r.route_type, r]));
  const types = [...Object.keys(ROUTES), ...[...byType.keys()].filter((t) => !ROUTES[t])];
  const rows = types.map((type) => {
    const r = byType.get(type) || {};
    const count = num(r.count);
    return { type, info: routeInfo(type), count, share: r.share !== undefined ? num(r.share) : total ? count / total : 0, r };
  });
  const rowHeight = 38;
  const labelWidth = 92;
  const valueWidth = 78;
  const height = rows.length * rowHeight + 4;
  const description = rows.map((row) => `${row.info.label}: ${row.count} (${formatPercent(row.share)})`).join("; ");
  const root = chartSvg("routes", width, height, "Route distribution", description);
  const barSpace = width - labelWidth - valueWidth;
  const max = Math.max(...rows.map((row) => row.share), 0.0001);
  rows.forEach((row, i) => {
    const y = i * rowHeight + 6;
    const g = svg("g", { class: `route-row route-${row.info.slug}`, "data-route": row.info.slug });
    g.append(svg("text", { x: 0, y: y + 14, class: "label" }, row.info.label));
    const hasFeedback = num(row.r.feedback_count) > 0;
    const sub = row.count
      ? `p50 ${formatMs(row.r.routing_latency_p50_ms)}${hasFeedback ? ` · ${formatPercent(row.r.satisfaction)} helpful` : ""}`
      : "none";
    g.append(svg("text", { x: 0, y: y + 29, class: "sublabel" }, sub));
    g.append(svg("rect", { x: labelWidth, y: y + 3, width: barSpace, height: 16, rx: 4, class: "track" }));
    const w = row.count ? Math.max(3, (row.share / max) * barSpace) : 0;
    g.append(
      svg("rect", {
        x: labelWidth,
        y: y + 3,
        width: w.toFixed(1),
        height: 16,
        rx: 4,
        class: "bar",
        "data-route": row.info.slug,
        "data-value": row.count,
      }),
    );
    g.append(svg("text", { x: width, y: y + 16, class: "value", "text-anchor": "end" }, `${row.count} · ${formatPercent(row.share)}`));
    root.append(g);
  });
  return root;
}

// Vertical bars for the routing latency percentiles on a rounded scale.
function latencyChart(stats, width) {
  const bars = [
    ["p50", num(stats.routing_latency_p50_ms)],
    ["p95", num(stats.routing_latency_p95_ms)],
    ["p99", num(stats.routing_latency_p99_ms)],
  ];
  const height = 128;
  const top = 18;
  const bottom = 22;
  const left = 44;
  const plotHeight = height - top - bottom;
  const max = niceCeiling(Math.max(...bars.map(([, v]) => v), 1));
  const description = bars.map(([name, v]) => `${name} ${formatMs(v)}`).join(", ");
  const root = chartSvg("latency", width, height, "Routing latency percentiles", description);
  for (const fraction of [0, 0.5, 1]) {
    const y = top + plotHeight * (1 - fraction);
    root.append(svg("line", { x1: left, x2: width, y1: y, y2: y, class: fraction === 0 ? "axis" : "grid" }));
    root.append(svg("text", { x: left - 6, y: y + 4, class: "tick", "text-anchor": "end" }, formatTick(max * fraction)));
  }
  const slot = (width - left) / bars.length;
  const barWidth = Math.min(56, slot * 0.5);
  bars.forEach(([name, value], i) => {
    const h = value > 0 ? Math.max(2, (value / max) * plotHeight) : 0;
    const x = left + slot * i + (slot - barWidth) / 2;
    const y = top + plotHeight - h;
    root.append(svg("rect", { x, y, width: barWidth, height: h, rx: 3, class: `bar pct-${name}`, "data-metric": name, "data-value": value }));
    root.append(svg("text", { x: x + barWidth / 2, y: y - 5, class: "value", "text-anchor": "middle" }, formatMs(value)));
    root.append(svg("text", { x: x + barWidth / 2, y: height - 6, class: "label", "text-anchor": "middle" }, name));
  });
  return root;
}

// One 0–100% gauge per rate.
function ratesChart(stats, width) {
  const feedback = num(stats.feedback_count);
  const rates = [
    ["cache-hit", "Cache hit", num(stats.cache_hit_rate), ""],
    ["fallback", "Fallback", num(stats.fallback_rate), ""],
    ["false-routing", "False routing", num(stats.false_routing_rate), feedback ? `of ${feedback} feedback` : "no feedback yet"],
    ["degraded", "Degraded", num(stats.degraded_rate), ""],
  ];
  const rowHeight = 32;
  const labelWidth = 104;
  const valueWidth = 52;
  const height = rates.length * rowHeight + 2;
  const description = rates.map(([, label, v]) => `${label} ${formatPercent(v)}`).join(", ");
  const root = chartSvg("rates", width, height, "Cache hit, fallback, false routing and degraded rates", description);
  const barSpace = width - labelWidth - valueWidth;
  rates.forEach(([key, label, value, note], i) => {
    const y = i * rowHeight + 4;
    root.append(svg("text", { x: 0, y: y + 12, class: "label" }, label));
    if (note) root.append(svg("text", { x: 0, y: y + 25, class: "sublabel" }, note));
    root.append(svg("rect", { x: labelWidth, y: y + 2, width: barSpace, height: 12, rx: 6, class: "track" }));
    const w = Math.min(1, Math.max(0, value)) * barSpace;
    root.append(
      svg("rect", {
        x: labelWidth,
        y: y + 2,
        width: value > 0 ? Math.max(3, w).toFixed(1) : 0,
        height: 12,
        rx: 6,
        class: `bar rate-${key}`,
        "data-metric": key,
        "data-value": value,
      }),
    );
    root.append(svg("text", { x: width, y: y + 13, class: "value", "text-anchor": "end" }, formatPercent(value)));
  });
  return root;
}

// The smallest 1, 2 or 5 × 10^n at or above value.
function niceCeiling(value) {
  const power = 10 ** Math.floor(Math.log10(value));
  for (const step of [1, 2, 5, 10]) if (step * power >= value) return step * power;
  return 10 * power;
}

function formatTick(ms) {
  if (ms >= 1000) return `${+(ms / 1000).toFixed(1)}s`;
  return `${+ms.toFixed(ms < 10 ? 1 : 0)}`;
}

// ---------------------------------------------------------------------------------------------
// Tool access by role: loaded when the view is first opened (the gateway may not be deployed)

async function fetchJson(url, init = {}) {
  const response = await fetch(url, { ...init, headers: headers(init.body ? { "content-type": "application/json" } : {}) });
  if (!response.ok) throw new Error(await errorMessage(response));
  return response.json();
}

async function allRoles() {
  const roles = [];
  let token = "";
  do {
    const url = new URL(API.roles, location.href);
    url.searchParams.set("page_size", "100");
    if (token) url.searchParams.set("page_token", token);
    const page = await fetchJson(url);
    roles.push(...(page.roles || []));
    token = page.next_page_token || "";
  } while (token && roles.length < 1000);
  return roles;
}

async function refreshRoles() {
  const request = ++state.rolesRequest;
  const box = $("#roles");
  const list = $("#roles-list");
  box.dataset.state = "loading";
  box.setAttribute("aria-busy", "true");
  $("#roles-message").textContent = "Loading…";
  try {
    const roles = await allRoles();
    const access = await Promise.all(
      roles.map((role) => fetchJson(API.policies, { method: "POST", body: JSON.stringify({ subject: { role: role.id } }) })),
    );
    if (request !== state.rolesRequest) return;
    list.replaceChildren(...roles.map((role, i) => roleAccess(role, access[i])));
    box.dataset.state = roles.length ? "ready" : "empty";
    const policies = access[0]?.policies?.length || 0;
    $("#roles-message").textContent = roles.length
      ? `${policies} ${policies === 1 ? "policy" : "policies"} in force · updated ${new Date().toLocaleTimeString()}`
      : "No roles yet.";
  } catch (error) {
    if (request !== state.rolesRequest) return;
    box.dataset.state = "error";
    list.replaceChildren();
    $("#roles-message").textContent = `Could not load tool access: ${error.message}`;
  } finally {
    if (request === state.rolesRequest) box.setAttribute("aria-busy", "false");
  }
}

// One role: the tools it may call, by server (pinned and hidden ones marked), and those it may not.
function roleAccess(role, access) {
  const tools = access.tools || [];
  const callable = tools.filter((t) => t.callable);
  const refused = tools.filter((t) => !t.callable);
  const applying = access.applying || [];
  const byServer = new Map();
  for (const tool of callable) {
    if (!byServer.has(tool.server)) byServer.set(tool.server, []);
    byServer.get(tool.server).push(tool);
  }
  const servers = [...byServer.entries()].map(([server, serverTools]) =>
    el(
      "div",
      { class: "role-server", "data-server": server },
      el("h4", { text: `${server} · ${serverTools.length}` }),
      el(
        "ul",
        { class: "tool-chips" },
        ...serverTools.map((tool) => {
          const [, short] = splitTool(tool.name, tool.server);
          const marks = [tool.pinned && "pinned", !tool.listed && "hidden"].filter(Boolean);
          return el(
            "li",
            {
              class: `tool-chip${tool.pinned ? " pinned" : ""}${tool.listed ? "" : " unlisted"}`,
              "data-tool": tool.name,
              title: marks.length ? `${tool.name} (${marks.join(", ")})` : tool.name,
            },
            short,
            marks.length ? el("span", { class: "tool-mark", text: ` ${marks.join(", ")}` }) : null,
          );
        }),
      ),
    ),
  );
  const denied = refused.length
    ? el(
        "div",
        { class: "role-denied" },
        el("h4", { text: `Not allowed · ${refused.length}` }),
        el(
          "ul",
          { class: "tool-chips" },
          ...refused.map((tool) => el("li", { class: "tool-chip denied", "data-tool": tool.name, title: tool.refusal || "denied" }, tool.name)),
        ),
      )
    : null;
  return el(
    "article",
    { class: "role-access", "data-role": role.id, "data-callable": callable.length, "data-denied": refused.length },
    el(
      "header",
      {},
      el("h3", { text: role.name || role.id }),
      el("code", { text: role.id }),
      el("span", { class: "role-count", text: `${callable.length} of ${tools.length} tools` }),
    ),
    applying.length ? el("p", { class: "hint", text: `Policies: ${applying.join(", ")}` }) : el("p", { class: "hint", text: "No policy names this role: every tool is allowed." }),
    ...servers,
    callable.length ? null : el("p", { class: "hint", text: "No tool may be used." }),
    denied,
  );
}

// ---------------------------------------------------------------------------------------------
// Wiring

function init() {
  const form = $("#chat-form");
  const input = $("#chat-input");

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const message = input.value.trim();
    if (!message || state.controller) return;
    input.value = "";
    sendMessage(message);
  });
  input.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      form.requestSubmit();
    }
  });
  $("#stop").addEventListener("click", () => state.controller?.abort());

  $("#new-session").addEventListener("click", () => {
    state.controller?.abort();
    setSession("");
    for (const turn of document.querySelectorAll(".turn")) turn.remove();
    $("#turns").append(
      el("div", { id: "chat-empty", class: "empty" }, el("p", { class: "empty-title", text: "New session." }), el("p", { text: "The next message starts a fresh conversation." })),
    );
    setStatus("Started a new session");
    input.focus();
  });

  const keyInput = $("#api-key");
  keyInput.value = apiKey();
  $("#settings-form").addEventListener("submit", (event) => {
    event.preventDefault();
    try {
      if (keyInput.value.trim()) localStorage.setItem(KEY_STORAGE, keyInput.value.trim());
      else localStorage.removeItem(KEY_STORAGE);
      setStatus(keyInput.value.trim() ? "API key saved" : "API key cleared");
    } catch {
      setStatus("This browser does not allow saving the key", "error");
    }
    $("#settings").open = false;
    refreshStats();
  });
  $("#api-key-clear").addEventListener("click", () => {
    keyInput.value = "";
    try {
      localStorage.removeItem(KEY_STORAGE);
    } catch {
      // nothing stored
    }
    setStatus("API key cleared");
    refreshStats();
  });

  $("#stats-refresh").addEventListener("click", refreshStats);
  $("#roles").addEventListener("toggle", () => {
    if ($("#roles").open && $("#roles").dataset.state === "idle") refreshRoles();
  });
  $("#roles-refresh").addEventListener("click", refreshRoles);
  $("#stats-window").addEventListener("change", refreshStats);

  // Redrawn for the new width only: a redraw changes the height, which must not loop.
  let frame = 0;
  let drawnWidth = 0;
  new ResizeObserver(([entry]) => {
    const width = Math.round(entry.contentRect.width);
    if (width === drawnWidth) return;
    drawnWidth = width;
    cancelAnimationFrame(frame);
    frame = requestAnimationFrame(drawCharts);
  }).observe($("#charts"));

  setSession("");
  refreshStats();
  input.focus();
}

init();
