// goondan studio: one page, routed on location.pathname, no build step, no dependencies.
// Every piece of text from the API goes into the DOM through textContent (el()), never as HTML.

const TOKEN = new URLSearchParams(location.search).get("token");
const main = document.getElementById("main");
const liveBadge = document.getElementById("live");
const approvalCount = document.getElementById("approval-count");

// Render timings the browser tests read (window.studioTimings): one entry per page render.
window.studioTimings = [];

// ---------------------------------------------------------------- small helpers

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  if (attrs) {
    for (const [key, value] of Object.entries(attrs)) {
      if (value === undefined || value === null || value === false) continue;
      if (key === "class") node.className = value;
      else if (key === "text") node.textContent = value;
      else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
      else node.setAttribute(key, value === true ? "" : String(value));
    }
  }
  for (const child of children) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

function withToken(url) {
  if (!TOKEN) return url;
  return url + (url.includes("?") ? "&" : "?") + "token=" + encodeURIComponent(TOKEN);
}

class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

async function api(path, options) {
  const init = Object.assign({ headers: {} }, options || {});
  if (TOKEN) init.headers.Authorization = "Bearer " + TOKEN;
  if (init.body !== undefined) init.headers["Content-Type"] = "application/json";
  const response = await fetch(path, init);
  let payload = null;
  try {
    payload = await response.json();
  } catch (_) {
    payload = null;
  }
  if (!response.ok) {
    const err = (payload && payload.error) || {};
    throw new ApiError(response.status, err.code || "E_STUDIO_HTTP",
      err.message || `${response.status} ${response.statusText}`);
  }
  return payload;
}

function errorBox(error) {
  const code = error && error.code ? error.code + ": " : "";
  return el("div", { class: "error-box", role: "alert" },
    code + (error && error.message ? error.message : String(error)));
}

function toDate(value) {
  if (value === undefined || value === null || value === "") return null;
  if (typeof value === "number") return new Date(value > 1e12 ? value : value * 1000);
  const date = new Date(value);
  return Number.isNaN(date.getTime()) ? null : date;
}

function fmtTime(value) {
  const date = toDate(value);
  if (!date) return value ? String(value) : "";
  const now = new Date();
  const sameDay = date.toDateString() === now.toDateString();
  return sameDay ? date.toLocaleTimeString() : date.toLocaleString();
}

function fmtMs(ms) {
  if (ms === undefined || ms === null) return "running";
  if (ms < 1) return ms.toFixed(2) + " ms";
  if (ms < 1000) return Math.round(ms) + " ms";
  if (ms < 60000) return (ms / 1000).toFixed(ms < 10000 ? 2 : 1) + " s";
  return (ms / 60000).toFixed(1) + " min";
}

function fmtJson(value) {
  try {
    return JSON.stringify(value, null, 2);
  } catch (_) {
    return String(value);
  }
}

function statusTag(status) {
  return el("span", { class: "status status-" + String(status || "unknown") }, status || "unknown");
}

function link(href, text, attrs) {
  return el("a", Object.assign({ href: withToken(href), "data-nav": true }, attrs || {}), text);
}

function quotePath(...parts) {
  return parts.map((part) => encodeURIComponent(part)).join("/");
}

// ---------------------------------------------------------------- live streams

// At most one page stream (a conversation) plus the overview stream; both closed on navigation.
const streams = { overview: null, page: null };
const overviewListeners = new Set();
let lastOverview = null;

function openStream(path, handlers) {
  const source = new EventSource(withToken(path));
  for (const [name, handler] of Object.entries(handlers)) {
    source.addEventListener(name, (event) => {
      let data = null;
      try {
        data = JSON.parse(event.data);
      } catch (_) {
        return;
      }
      handler(data);
    });
  }
  return source;
}

function setLive(on) {
  liveBadge.textContent = on ? "live" : "offline";
  liveBadge.className = "live " + (on ? "on" : "off");
}

function startOverviewStream() {
  if (streams.overview) return;
  if (!lastOverview) {
    api("/api/overview").then((data) => {
      if (!lastOverview) updateApprovalBadge(data);
    }, () => {});
  }
  const source = openStream("/api/stream", {
    overview(data) {
      lastOverview = data;
      updateApprovalBadge(data);
      for (const listener of overviewListeners) listener(data);
    },
  });
  source.addEventListener("open", () => setLive(true));
  source.addEventListener("error", () => setLive(false));
  streams.overview = source;
}

function updateApprovalBadge(overview) {
  let pending = 0;
  for (const swarm of (overview && overview.swarms) || []) pending += swarm.pendingApprovals || 0;
  approvalCount.hidden = pending === 0;
  approvalCount.textContent = String(pending);
  approvalCount.setAttribute("aria-label", pending + " pending");
}

// ---------------------------------------------------------------- router

const routes = [
  [/^\/$/, "swarms", renderSwarms],
  [/^\/conversations\/?$/, "conversations", renderWorkspaces],
  [/^\/conversations\/([^/]+)\/([^/]+)\/([^/]+)\/?$/, "conversations", renderConversation],
  [/^\/traces\/?$/, "traces", renderTraceList],
  [/^\/traces\/([^/]+)\/?$/, "traces", renderTrace],
  [/^\/approvals\/?$/, "approvals", renderApprovals],
];

let renderSerial = 0;

async function route() {
  const serial = ++renderSerial;
  if (streams.page) {
    streams.page.close();
    streams.page = null;
  }
  overviewListeners.clear();
  const path = location.pathname;
  let handler = null;
  let params = [];
  let page = "";
  for (const [pattern, name, fn] of routes) {
    const match = pattern.exec(path);
    if (match) {
      handler = fn;
      page = name;
      params = match.slice(1).map((part) => decodeURIComponent(part));
      break;
    }
  }
  for (const a of document.querySelectorAll(".top nav a")) {
    if (a.dataset.page === page) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  const view = el("div", { class: "view" });
  const isCurrent = () => serial === renderSerial;
  if (!handler) {
    view.append(el("h1", null, "Not found"), el("p", null, "No studio page at " + path + "."));
    main.replaceChildren(view);
    return;
  }
  try {
    await handler(view, params, isCurrent);
  } catch (error) {
    if (!isCurrent()) return;
    view.append(errorBox(error));
    main.replaceChildren(view);
  }
  if (isCurrent()) document.title = (view.dataset.title || "studio") + " · goondan studio";
}

function navigate(href) {
  history.pushState(null, "", href);
  route().then(() => main.focus({ preventScroll: true }));
  window.scrollTo(0, 0);
}

document.addEventListener("click", (event) => {
  if (event.defaultPrevented || event.button !== 0) return;
  if (event.metaKey || event.ctrlKey || event.shiftKey || event.altKey) return;
  const a = event.target.closest("a[data-nav]");
  if (!a || a.origin !== location.origin) return;
  event.preventDefault();
  navigate(a.getAttribute("href"));
});
window.addEventListener("popstate", () => route());

function mark(page, started, fetched, count) {
  // The time to build and lay out the DOM, after the data arrived (layout forced).
  void main.offsetHeight;
  const done = performance.now();
  const entry = {
    page, count, fetchMs: fetched - started, renderMs: done - fetched, paintedMs: null,
  };
  window.studioTimings.push(entry);
  // paintedMs: from the data's arrival to the first frame drawn with it.
  requestAnimationFrame(() => setTimeout(() => {
    entry.paintedMs = performance.now() - fetched;
  }, 0));
}

// ---------------------------------------------------------------- swarms (/)

async function renderSwarms(view, _params, isCurrent) {
  view.dataset.title = "Swarms";
  const overview = await api("/api/overview");
  if (!isCurrent()) return;
  lastOverview = overview;
  updateApprovalBadge(overview);
  const body = el("div");
  fillOverview(body, overview);
  view.append(el("h1", null, "Swarms"),
    el("p", { class: "muted" }, "State root ", el("code", null, overview.stateRoot || "")), body);
  main.replaceChildren(view);
  overviewListeners.add((data) => fillOverview(body, data));
}

function fillOverview(body, overview) {
  const parts = [];
  const swarms = overview.swarms || [];
  if (!swarms.length) {
    parts.push(el("p", { class: "panel muted" },
      "No swarm is running. Start one with goondan run; its conversations stay listed below."));
  }
  for (const swarm of swarms) parts.push(swarmPanel(swarm));
  parts.push(el("h2", null, "Workspaces"));
  parts.push(workspaceList(overview.workspaces || []));
  body.replaceChildren(...parts);
}

function swarmPanel(swarm) {
  const rows = (swarm.processes || []).map((proc) => el("tr", null,
    el("td", { "data-label": "agent" }, proc.agent),
    el("td", { "data-label": "instance", class: "mono" }, proc.instanceKey),
    el("td", { "data-label": "pid", class: "num" }, proc.pid ?? ""),
    el("td", { "data-label": "state" }, statusTag(proc.state)),
    el("td", { "data-label": "restarts", class: "num" }, proc.restarts ?? 0),
    el("td", { "data-label": "queued", class: "num" }, proc.queued ?? 0)));
  const pending = swarm.pendingApprovals || 0;
  return el("section", { class: "panel swarm", "aria-label": "swarm " + swarm.name },
    el("h2", { style: "margin-top:0" }, swarm.name + " ", statusTag(swarm.status)),
    el("div", { class: "conv-head muted" },
      swarm.workspaceId ? el("span", null, "workspace ", el("code", null, swarm.workspaceId))
        : null,
      swarm.pid ? el("span", null, "pid " + swarm.pid) : null,
      swarm.startedAt ? el("span", null, "started " + fmtTime(swarm.startedAt)) : null,
      swarm.bundleDir ? el("span", null, "bundle ", el("code", null, swarm.bundleDir)) : null,
      pending ? link("/approvals", pending + " pending approval" + (pending > 1 ? "s" : ""))
        : el("span", null, "no pending approvals")),
    rows.length ? el("div", { class: "table-wrap" }, el("table", { class: "stack" },
      el("thead", null, el("tr", null, el("th", null, "Agent"), el("th", null, "Instance"),
        el("th", { class: "num" }, "PID"), el("th", null, "State"),
        el("th", { class: "num" }, "Restarts"), el("th", { class: "num" }, "Queued"))),
      el("tbody", null, ...rows))) : el("p", { class: "muted" }, "No agent process yet."));
}

function workspaceList(workspaces) {
  if (!workspaces.length) return el("p", { class: "muted" }, "No conversations recorded yet.");
  const out = el("div");
  for (const ws of workspaces) {
    const section = el("section", { class: "panel workspace" },
      el("h3", { style: "margin-top:0" }, "Workspace ", el("code", null, ws.workspaceId)),
      ws.bundleDir ? el("p", { class: "muted" }, "bundle ", el("code", null, ws.bundleDir)) : null);
    const byAgent = new Map();
    for (const inst of ws.instances || []) {
      const agent = inst.agent || "(no agent name)";
      if (!byAgent.has(agent)) byAgent.set(agent, []);
      byAgent.get(agent).push(inst);
    }
    for (const agent of [...byAgent.keys()].sort()) {
      const items = byAgent.get(agent).map((inst) => el("li", null,
        link(inst.href || "/conversations/" + quotePath(ws.workspaceId, inst.agent || "-",
          inst.instanceKey),
          inst.instanceKey, { class: "mono" }),
        statusTag(inst.status),
        el("span", { class: "muted" }, (inst.messageCount ?? 0) + " messages"),
        inst.updatedAt ? el("span", { class: "muted" }, "updated " + fmtTime(inst.updatedAt)) : null));
      section.append(el("div", { class: "agent-group" },
        el("h4", { style: "margin:0.3rem 0" }, agent), el("ul", null, ...items)));
    }
    if (!byAgent.size) section.append(el("p", { class: "muted" }, "No instances."));
    out.append(section);
  }
  return out;
}

async function renderWorkspaces(view, _params, isCurrent) {
  view.dataset.title = "Conversations";
  const overview = await api("/api/overview");
  if (!isCurrent()) return;
  const body = el("div", null, workspaceList(overview.workspaces || []));
  view.append(el("h1", null, "Conversations"), body);
  main.replaceChildren(view);
  overviewListeners.add((data) => body.replaceChildren(workspaceList(data.workspaces || [])));
}

// ---------------------------------------------------------------- conversations

// Messages shown at first; "Show earlier" prepends the rest in pages of this size.
const MESSAGE_WINDOW = 2000;

async function renderConversation(view, params, isCurrent) {
  const [workspaceId, agent, instanceKey] = params;
  const base = "/api/conversations/" + quotePath(workspaceId, agent, instanceKey);
  const query = new URLSearchParams(location.search).get("q") || "";
  view.dataset.title = agent + " / " + instanceKey;
  const started = performance.now();
  const data = await api(base + (query ? "?q=" + encodeURIComponent(query) : ""));
  if (!isCurrent()) return;
  const fetched = performance.now();
  const instance = data.instance || { agent, instanceKey };
  const conv = new Conversation(data.messages || [], query);
  const status = el("span", { class: "inst-status" }, statusTag(instance.status));
  const counter = el("span", { class: "muted msg-count" });
  const search = el("input", {
    type: "search", id: "conv-search", name: "q", value: query,
    placeholder: "text in messages",
  });
  const form = el("form", { class: "inline", role: "search" },
    el("label", { for: "conv-search" }, "Search"), search,
    el("button", { type: "submit" }, "Search"),
    query ? el("button", { type: "button", onclick: () => setQuery("") }, "Clear") : null);
  const setQuery = (text) => {
    const url = location.pathname + "?" + new URLSearchParams(
      Object.assign(TOKEN ? { token: TOKEN } : {}, text ? { q: text } : {})).toString();
    navigate(url.endsWith("?") ? url.slice(0, -1) : url);
  };
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    setQuery(search.value.trim());
  });
  view.append(
    el("nav", { class: "crumbs", "aria-label": "Breadcrumb" },
      link("/conversations", "Conversations"), " / ", el("code", null, workspaceId)),
    el("h1", null, agent + " ", el("code", null, instanceKey)),
    el("div", { class: "conv-head" }, status, counter,
      instance.updatedAt ? el("span", { class: "muted" }, "updated " + fmtTime(instance.updatedAt))
        : null),
    form, conv.root);
  conv.onCount = (shown) => {
    counter.textContent = query
      ? shown + " of " + (data.total ?? shown) + " messages match “" + query + "”"
      : shown + " messages";
  };
  conv.renderInitial();
  main.replaceChildren(view);
  mark("conversation", started, fetched, conv.messages.length);
  conv.scrollToEnd();
  // Live follow: opened only now, after the page is complete without it.
  streams.page = openStream(base + "/stream", {
    message: (msg) => conv.add(msg),
    remove: (event) => conv.remove(event.id),
    // The file was rewritten (compaction): the page loads the list again.
    reset: () => route(),
    status: (s) => status.replaceChildren(statusTag(s.status)),
  });
}

// The message's look: its role, or "extension" / "system" when such a source wrote it.
function messageKind(msg) {
  const type = (msg.source && msg.source.type) || "";
  if (type === "extension") return "extension";
  if (msg.role === "system" || type === "system") return "system";
  return msg.role || "assistant";
}

// Who wrote the message when it is not simply its role (an extension, a connector …).
function sourceLabel(msg) {
  const source = msg.source;
  if (!source) return "";
  const name = source.extensionName || source.connectorName || source.connector || source.name;
  if (name) return String(name);
  return source.type && source.type !== msg.role ? String(source.type) : "";
}

function argsPreview(args) {
  let text = "";
  try {
    text = JSON.stringify(args) || "";
  } catch (_) {
    text = "";
  }
  return text.length > 80 ? text.slice(0, 77) + "…" : text;
}

class Conversation {
  constructor(messages, query) {
    this.messages = [];
    this.ids = new Map(); // message id -> element
    this.calls = new Map(); // tool call id -> details element
    this.query = query.toLowerCase();
    this.root = el("div", { class: "messages", role: "log", "aria-live": "polite" });
    this.hiddenBefore = 0;
    this.onCount = () => {};
    for (const msg of messages) this.messages.push(msg);
  }

  renderInitial() {
    const all = this.messages;
    this.hiddenBefore = Math.max(0, all.length - MESSAGE_WINDOW);
    const frag = document.createDocumentFragment();
    if (this.hiddenBefore) frag.append(this.earlierButton());
    for (let i = this.hiddenBefore; i < all.length; i++) {
      const node = this.build(all[i]);
      if (node) frag.append(node);
    }
    if (!all.length) {
      frag.append(el("p", { class: "muted empty" },
        this.query ? "No message matches." : "No messages yet."));
    }
    this.root.replaceChildren(frag);
    this.onCount(all.length);
  }

  earlierButton() {
    return el("button", {
      type: "button", class: "show-earlier",
      onclick: (event) => this.showEarlier(event.currentTarget),
    }, "Show " + Math.min(this.hiddenBefore, MESSAGE_WINDOW) + " earlier messages (of "
      + this.hiddenBefore + ")");
  }

  showEarlier(button) {
    const from = Math.max(0, this.hiddenBefore - MESSAGE_WINDOW);
    const frag = document.createDocumentFragment();
    const saved = this.calls;
    this.calls = new Map();
    for (let i = from; i < this.hiddenBefore; i++) {
      const node = this.build(this.messages[i]);
      if (node) frag.append(node);
    }
    for (const [key, value] of saved) this.calls.set(key, value);
    this.hiddenBefore = from;
    if (from) frag.prepend(this.earlierButton());
    const first = button.nextElementSibling;
    button.replaceWith(frag);
    if (first) first.focus?.();
  }

  matches(msg) {
    if (!this.query) return true;
    const hay = [msg.text || "", msg.toolName || ""];
    for (const call of msg.toolCalls || []) hay.push(call.name, argsPreview(call.arguments));
    return hay.join("\n").toLowerCase().includes(this.query);
  }

  add(msg) {
    if (!msg || msg.id === undefined) return;
    if (msg.replaces !== undefined && msg.replaces !== msg.id && this.ids.has(msg.replaces)) {
      this.replace(msg.replaces, msg);
      return;
    }
    const known = this.ids.get(msg.id);
    if (known) {
      // The same message again (folded after its turn ended): only its pending mark changes.
      if (known.matches("details.call")) {
        fillResult(known, msg);
      } else if (!msg.pending) {
        known.classList.remove("msg-pending");
        known.querySelector(".tag-pending")?.remove();
      }
      return;
    }
    if (!this.matches(msg)) return;
    this.messages.push(msg);
    const follow = this.nearEnd();
    this.root.querySelector(".empty")?.remove();
    const node = this.build(msg);
    if (node) this.root.append(node);
    this.onCount(this.messages.length);
    if (follow) this.scrollToEnd();
  }

  // A message rewritten during the turn (a replace event): the new one takes the old's place.
  replace(oldId, msg) {
    const old = this.ids.get(oldId);
    this.ids.delete(oldId);
    const index = this.messages.findIndex((m) => m.id === oldId);
    if (index >= 0) this.messages[index] = msg;
    if (old.matches("details.call")) {
      fillResult(old, msg);
      this.ids.set(msg.id, old);
      return;
    }
    const node = this.build(msg);
    if (node) old.replaceWith(node);
    else old.remove();
  }

  remove(id) {
    const old = this.ids.get(id);
    if (!old) return;
    this.ids.delete(id);
    this.messages = this.messages.filter((m) => m.id !== id);
    if (old.matches("details.call")) old.querySelector(".call-result")?.remove();
    else old.remove();
    this.onCount(this.messages.length);
  }

  nearEnd() {
    return window.innerHeight + window.scrollY >= document.body.scrollHeight - 120;
  }

  scrollToEnd() {
    window.scrollTo(0, document.body.scrollHeight);
  }

  // One message as an element; a tool result whose call is on the page goes into that call's
  // <details> instead (returns null then).
  build(msg) {
    if (msg.role === "tool" && msg.toolCallId && this.calls.has(msg.toolCallId)) {
      const details = this.calls.get(msg.toolCallId);
      fillResult(details, msg);
      this.ids.set(msg.id, details);
      return null;
    }
    const kind = messageKind(msg);
    let cls = "msg msg-" + kind;
    if (msg.pending) cls += " msg-pending";
    if (msg.isError) cls += " msg-error";
    const head = el("div", { class: "msg-head" },
      el("span", { class: "msg-role" }, kind === msg.role ? msg.role : kind),
      sourceLabel(msg) ? el("span", { class: "msg-source" }, sourceLabel(msg)) : null,
      msg.toolName ? el("span", { class: "mono" }, msg.toolName) : null,
      msg.createdAt ? el("time", null, fmtTime(msg.createdAt)) : null,
      msg.pending ? el("span", { class: "tag tag-pending" }, "turn running") : null,
      msg.isError ? el("span", { class: "tag tag-err" }, "error") : null);
    const node = el("article", { class: cls, "data-id": msg.id, "data-role": msg.role }, head);
    if (msg.text) node.append(el("div", { class: "msg-text" }, msg.text));
    for (const call of msg.toolCalls || []) {
      const details = el("details", { class: "call", "data-call-id": call.id },
        el("summary", null, el("span", { class: "call-name" }, call.name),
          el("span", { class: "args-preview" }, " " + argsPreview(call.arguments)),
          el("span", { class: "call-state muted" }, " · waiting for result")),
        el("div", { class: "call-body" }, el("h4", null, "arguments"),
          el("pre", null, fmtJson(call.arguments))));
      this.calls.set(call.id, details);
      node.append(details);
    }
    this.ids.set(msg.id, node);
    return node;
  }
}

function fillResult(details, msg) {
  const body = details.querySelector(".call-body");
  body.querySelector(".call-result")?.remove();
  body.append(el("div", { class: "call-result", "data-id": msg.id },
    el("h4", null, msg.isError ? "result (error)" : "result"),
    el("pre", null, msg.text ?? "")));
  details.querySelector(".call-state").textContent = msg.isError ? " · error" : " · done";
  details.classList.toggle("error", Boolean(msg.isError));
}

// ---------------------------------------------------------------- traces

async function renderTraceList(view, _params, isCurrent) {
  view.dataset.title = "Traces";
  const data = await api("/api/traces?limit=50");
  if (!isCurrent()) return;
  view.append(el("h1", null, "Traces"), traceIdForm());
  const traces = data.traces || [];
  if (!traces.length) {
    view.append(el("p", { class: "muted" }, "No trace recorded yet."));
  } else {
    const rows = traces.map((t) => el("tr", { class: t.error ? "error" : null },
      el("td", { "data-label": "trace" }, link("/traces/" + encodeURIComponent(t.traceId),
        t.traceId.slice(0, 16), { class: "mono" })),
      el("td", { "data-label": "root" }, t.rootName || ""),
      el("td", { "data-label": "started" }, fmtTime(t.startedAt)),
      el("td", { "data-label": "duration", class: "num" }, fmtMs(t.durationMs)),
      el("td", { "data-label": "spans", class: "num" }, t.spanCount ?? ""),
      el("td", { "data-label": "status" }, t.error ? statusTag("error") : statusTag("ok"))));
    view.append(el("div", { class: "table-wrap panel" }, el("table", { class: "stack" },
      el("thead", null, el("tr", null, el("th", null, "Trace"), el("th", null, "Root"),
        el("th", null, "Started"), el("th", { class: "num" }, "Duration"),
        el("th", { class: "num" }, "Spans"), el("th", null, "Status"))),
      el("tbody", null, ...rows))));
  }
  main.replaceChildren(view);
}

function traceIdForm(value) {
  const input = el("input", {
    type: "text", id: "trace-id", name: "traceId", value: value || "",
    placeholder: "trace id from inspect trace or a log line", autocomplete: "off",
    spellcheck: "false",
  });
  const form = el("form", { class: "inline" },
    el("label", { for: "trace-id" }, "Open trace"), input,
    el("button", { type: "submit", class: "primary" }, "Open"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const id = input.value.trim();
    if (id) navigate(withToken("/traces/" + encodeURIComponent(id)));
  });
  return form;
}

const KINDS = ["turn", "step", "llm", "tool", "request", "approval", "ingress"];

function spanKind(span) {
  return KINDS.includes(span.kind) ? span.kind : "other";
}

function spanTree(spans) {
  const byId = new Map();
  for (const span of spans) byId.set(span.spanId, { span, children: [] });
  const roots = [];
  for (const node of byId.values()) {
    const parent = node.span.parentSpanId ? byId.get(node.span.parentSpanId) : null;
    if (parent && parent !== node) parent.children.push(node);
    else roots.push(node);
  }
  const order = (a, b) => (a.span.startMs ?? 0) - (b.span.startMs ?? 0);
  const out = [];
  const stack = roots.sort(order).reverse().map((node) => [node, 0]);
  while (stack.length) {
    const [node, depth] = stack.pop();
    out.push([node.span, depth, node.children.length]);
    node.children.sort(order);
    for (let i = node.children.length - 1; i >= 0; i--) stack.push([node.children[i], depth + 1]);
  }
  return out;
}

function spanFacts(span) {
  const a = span.attributes || {};
  const facts = [fmtMs(span.durationMs)];
  const input = a.inputTokens ?? a.promptTokens;
  const output = a.outputTokens ?? a.completionTokens;
  if (input || output || (span.kind === "llm" && input !== undefined)) {
    facts.push(`${input ?? 0}→${output ?? 0} tok`);
  }
  if (typeof a.costUsd === "number") facts.push("$" + a.costUsd.toFixed(a.costUsd < 0.01 ? 6 : 4));
  return facts.join(" · ");
}

async function renderTrace(view, params, isCurrent) {
  const [traceId] = params;
  view.dataset.title = "Trace " + traceId.slice(0, 12);
  const started = performance.now();
  view.append(el("nav", { class: "crumbs", "aria-label": "Breadcrumb" }, link("/traces", "Traces")),
    el("h1", null, "Trace ", el("code", null, traceId)), traceIdForm(traceId));
  let data;
  try {
    data = await api("/api/traces/" + encodeURIComponent(traceId));
  } catch (error) {
    if (!isCurrent()) return;
    view.append(errorBox(error));
    main.replaceChildren(view);
    return;
  }
  if (!isCurrent()) return;
  const fetched = performance.now();
  const spans = data.spans || [];
  const now = Date.now();
  let t0 = Infinity;
  let t1 = -Infinity;
  let inTok = 0;
  let outTok = 0;
  let cost = 0;
  let costKnown = false;
  let errors = 0;
  const agents = new Set();
  for (const s of spans) {
    const end = s.durationMs === null || s.durationMs === undefined ? now : s.startMs + s.durationMs;
    t0 = Math.min(t0, s.startMs);
    t1 = Math.max(t1, end);
    const a = s.attributes || {};
    if (s.kind === "llm") {
      inTok += a.inputTokens ?? a.promptTokens ?? 0;
      outTok += a.outputTokens ?? a.completionTokens ?? 0;
      if (typeof a.costUsd === "number") {
        cost += a.costUsd;
        costKnown = true;
      }
    }
    if (s.status === "error") errors++;
    if (s.agent) agents.add(s.agent);
  }
  // The server's totals (those of inspect trace) win over the sum of the LLM spans.
  if (data.tokenUsage) {
    inTok = data.tokenUsage.prompt ?? inTok;
    outTok = data.tokenUsage.completion ?? outTok;
  }
  if (typeof data.cost === "number") {
    cost = data.cost;
    costKnown = true;
  }
  const total = Math.max(t1 - t0, 0.001);
  view.append(el("div", { class: "trace-summary" },
    el("span", null, spans.length + " spans"),
    el("span", null, "duration " + fmtMs(spans.length ? t1 - t0 : 0)),
    el("span", null, "tokens " + inTok + "→" + outTok),
    costKnown ? el("span", null, "cost $" + cost.toFixed(6)) : null,
    el("span", null, "agents " + [...agents].join(", ")),
    errors ? el("span", { class: "status status-error" }, errors + " error" + (errors > 1 ? "s" : ""))
      : null),
  el("div", { class: "legend", "aria-hidden": "true" }, ...KINDS.map((k) =>
    el("span", null, el("i", { class: "k-" + k }), k))));
  const rows = spanTree(spans);
  const waterfall = el("div", { class: "waterfall", role: "tree", "aria-label": "Span waterfall" });
  const frag = document.createDocumentFragment();
  for (const [span, depth, childCount] of rows) {
    frag.append(spanRow(span, depth, childCount, t0, total));
  }
  waterfall.append(frag);
  waterfall.addEventListener("click", onToggleSpan);
  view.append(spans.length ? waterfall : el("p", { class: "muted" }, "No spans."));
  main.replaceChildren(view);
  mark("trace", started, fetched, spans.length);
}

function spanRow(span, depth, childCount, t0, total) {
  const kind = spanKind(span);
  const isError = span.status === "error";
  const running = span.durationMs === null || span.durationMs === undefined;
  const duration = running ? Date.now() - span.startMs : span.durationMs;
  const left = ((span.startMs - t0) / total) * 100;
  const width = Math.max((duration / total) * 100, 0.15);
  const label = el("div", { class: "wf-label", style: `padding-left:${0.4 + depth * 1.1}rem` },
    childCount ? el("button", {
      type: "button", class: "wf-toggle", "aria-expanded": "true",
      "aria-label": "collapse " + span.name,
    }, "▾") : el("span", { class: "wf-spacer" }),
    el("span", { class: "wf-kind k-" + kind }, span.kind || "span"),
    el("span", { class: "name", title: span.name }, span.name),
    el("span", { class: "agent" }, [span.agent, span.instanceKey].filter(Boolean).join(" · ")));
  const facts = spanFacts(span);
  const row = el("div", {
    class: "wf-row" + (isError ? " error" : ""), role: "treeitem", "aria-level": depth + 1,
    "data-span-id": span.spanId, "data-kind": span.kind, "data-depth": depth,
    "data-agent": span.agent,
    "aria-label": `${span.kind} ${span.name} ${facts}${isError ? " error" : ""}`,
  }, label, el("span", { class: "wf-meta" }, facts), el("div", { class: "wf-track" },
    el("div", {
      class: "wf-bar k-" + kind + (running ? " running" : ""),
      style: `left:${left}%;width:${width}%`,
    })));
  if (isError && span.error) row.append(el("div", { class: "wf-err" }, span.error));
  return row;
}

function onToggleSpan(event) {
  const button = event.target.closest(".wf-toggle");
  if (!button) return;
  const row = button.closest(".wf-row");
  const depth = Number(row.dataset.depth);
  const collapse = button.getAttribute("aria-expanded") === "true";
  button.setAttribute("aria-expanded", String(!collapse));
  button.textContent = collapse ? "▸" : "▾";
  let next = row.nextElementSibling;
  // Descendants follow their parent in preorder; a collapsed inner subtree stays collapsed.
  let hiddenUnder = Infinity;
  while (next && Number(next.dataset.depth) > depth) {
    const d = Number(next.dataset.depth);
    if (collapse) {
      next.hidden = true;
    } else {
      if (d <= hiddenUnder) hiddenUnder = Infinity;
      next.hidden = d > hiddenUnder;
      const inner = next.querySelector(".wf-toggle");
      if (!next.hidden && inner && inner.getAttribute("aria-expanded") === "false") hiddenUnder = d;
    }
    next = next.nextElementSibling;
  }
}

// ---------------------------------------------------------------- approvals

async function renderApprovals(view, _params, isCurrent) {
  view.dataset.title = "Approvals";
  const data = await api("/api/approvals");
  if (!isCurrent()) return;
  const list = el("div", { class: "approvals" });
  const decided = new Map(); // id -> card kept on screen after a decision in this page
  const history = el("div", { class: "table-wrap" });
  const fill = (approvals) => {
    const pending = approvals.filter((a) => a.status === "pending");
    const cards = pending.map((a) => approvalCard(a, decided));
    for (const [id, card] of decided) {
      if (!pending.some((a) => a.id === id)) cards.push(card);
    }
    if (!cards.length) cards.push(el("p", { class: "muted empty" }, "No pending approvals."));
    list.replaceChildren(...cards);
    history.replaceChildren(decidedTable(approvals.filter((a) => a.status !== "pending")));
  };
  fill(data.approvals || []);
  view.append(el("h1", null, "Approvals"), list, el("h2", null, "Decided"), history);
  main.replaceChildren(view);
  let lastPending = null;
  overviewListeners.add(async (overview) => {
    let pending = 0;
    for (const swarm of overview.swarms || []) pending += swarm.pendingApprovals || 0;
    if (pending === lastPending) return;
    lastPending = pending;
    if (list.contains(document.activeElement) && document.activeElement.tagName === "INPUT") return;
    try {
      const fresh = await api("/api/approvals");
      if (isCurrent()) fill(fresh.approvals || []);
    } catch (_) {
      /* the next overview event retries */
    }
  });
}

// The latest decisions (and expiries), newest first.
function decidedTable(approvals) {
  if (!approvals.length) return el("p", { class: "muted" }, "None yet.");
  const at = (a) => toDate(a.decidedAt || a.requestedAt)?.getTime() ?? 0;
  const rows = approvals.slice().sort((a, b) => at(b) - at(a)).slice(0, 50).map((a) =>
    el("tr", null,
      el("td", { "data-label": "tool", class: "mono" }, a.toolName),
      el("td", { "data-label": "agent" }, a.agent + " · " + a.instanceKey),
      el("td", { "data-label": "status" }, statusTag(a.status)),
      el("td", { "data-label": "by" }, a.decidedBy || ""),
      el("td", { "data-label": "reason" }, a.denyReason || ""),
      el("td", { "data-label": "when" }, fmtTime(a.decidedAt || a.expiresAt))));
  return el("table", { class: "stack" },
    el("thead", null, el("tr", null, el("th", null, "Tool"), el("th", null, "Agent"),
      el("th", null, "Status"), el("th", null, "By"), el("th", null, "Reason"),
      el("th", null, "When"))),
    el("tbody", null, ...rows));
}

function approvalCard(approval, decided) {
  const reasonId = "reason-" + approval.id;
  const reason = el("input", { type: "text", id: reasonId, name: "reason", autocomplete: "off" });
  const outcome = el("p", { class: "outcome", role: "status" });
  const approveBtn = el("button", { type: "button", class: "primary" }, "Approve");
  const denyBtn = el("button", { type: "button", class: "danger" }, "Deny");
  const card = el("section", {
    class: "panel approval", "data-approval-id": approval.id,
    "aria-label": "approval " + approval.toolName,
  },
  el("h2", null, approval.toolName),
  el("div", { class: "meta" },
    el("span", null, "agent " + approval.agent),
    el("span", { class: "mono" }, approval.instanceKey),
    approval.swarm ? el("span", null, "swarm " + approval.swarm) : null,
    el("span", null, "workspace " + approval.workspaceId),
    el("span", null, "requested " + fmtTime(approval.requestedAt))),
  approval.reason ? el("p", null, "Why it needs approval: " + approval.reason) : null,
  el("pre", { "aria-label": "arguments" }, fmtJson(approval.arguments)),
  el("div", { class: "decide" },
    el("label", { for: reasonId }, "Reason (optional)", reason), approveBtn, denyBtn),
  outcome);
  const decide = async (decision) => {
    approveBtn.disabled = true;
    denyBtn.disabled = true;
    outcome.textContent = decision === "approve" ? "Approving…" : "Denying…";
    try {
      const body = { decision };
      if (reason.value.trim()) body.reason = reason.value.trim();
      const result = await api("/api/approvals/" + encodeURIComponent(approval.id), {
        method: "POST", body: JSON.stringify(body),
      });
      const status = (result.approval && result.approval.status) || decision + "d";
      outcome.replaceChildren(statusTag(status),
        result.approval && result.approval.decidedBy ? " by " + result.approval.decidedBy : "");
      decided.set(approval.id, card);
      reason.disabled = true;
    } catch (error) {
      outcome.replaceChildren(errorBox(error));
      if (error.status !== 409) {
        approveBtn.disabled = false;
        denyBtn.disabled = false;
      } else {
        decided.set(approval.id, card);
      }
    }
  };
  approveBtn.addEventListener("click", () => decide("approve"));
  denyBtn.addEventListener("click", () => decide("deny"));
  return card;
}

// ---------------------------------------------------------------- start

route().then(() => {
  // Live overview updates start only after the first page is on screen.
  startOverviewStream();
});
