// A conversation (/conversations/<workspace>/<agent>/<key>): messages with tool calls as
// collapsible call/result pairs, search, live follow over the conversation's event stream.

import {
  TOKEN, api, el, fmtJson, fmtTime, link, main, mark, navigate, openStream, quotePath, rerender,
  setPageStream, statusTag,
} from "./core.js";

// ---------------------------------------------------------------- conversations

// Messages shown at first; "Show earlier" prepends the rest in pages of this size.
const MESSAGE_WINDOW = 2000;

export async function renderConversation(view, params, isCurrent) {
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
    const noun = shown === 1 ? " message" : " messages";
    counter.textContent = shown + noun + (query ? " matching “" + query + "”" : "");
  };
  conv.renderInitial();
  main.replaceChildren(view);
  mark("conversation", started, fetched, conv.messages.length);
  conv.scrollToEnd();
  // Live follow: opened only now, after the page is complete without it. The stream starts at
  // the list's cursor (where the fetch read the files): nothing written in between is lost, and
  // a reconnect starts there again (messages already shown are recognised by their id).
  const cursor = data.cursor ? "?cursor=" + encodeURIComponent(data.cursor) : "";
  setPageStream(openStream(base + "/stream" + cursor, {
    message: (msg) => conv.add(msg),
    remove: (event) => conv.remove(event.id),
    // The file was rewritten (compaction): the page loads the list again.
    reset: () => rerender(),
    status: (s) => status.replaceChildren(statusTag(s.status)),
  }));
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
    this.listed = new Set(messages.map((msg) => msg.id)); // also those behind "Show earlier"
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
    if (this.listed.has(msg.id)) return; // sent again, but behind "Show earlier"
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

// A result that is JSON text (an object or a list) is shown indented, like the arguments.
function prettyResult(text) {
  if (!text) return "";
  const first = text.trimStart()[0];
  if (first !== "{" && first !== "[") return text;
  try {
    return fmtJson(JSON.parse(text));
  } catch (_) {
    return text;
  }
}

function fillResult(details, msg) {
  const body = details.querySelector(".call-body");
  body.querySelector(".call-result")?.remove();
  body.append(el("div", { class: "call-result", "data-id": msg.id },
    el("h4", null, msg.isError ? "result (error)" : "result"),
    el("pre", null, prettyResult(msg.text))));
  details.querySelector(".call-state").textContent = msg.isError ? " · error" : " · done";
  details.classList.toggle("error", Boolean(msg.isError));
}
