// goondan studio, shared pieces: DOM building (el: text always through textContent, never as
// HTML), the API client, formatting, the live streams and navigation.

export const TOKEN = new URLSearchParams(location.search).get("token");
export const main = document.getElementById("main");
const liveBadge = document.getElementById("live");
const approvalCount = document.getElementById("approval-count");

// Render timings the browser tests read (window.studioTimings): one entry per page render.
window.studioTimings = [];

// ---------------------------------------------------------------- small helpers

export function el(tag, attrs, ...children) {
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

export function withToken(url) {
  if (!TOKEN) return url;
  return url + (url.includes("?") ? "&" : "?") + "token=" + encodeURIComponent(TOKEN);
}

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

export async function api(path, options) {
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

export function errorBox(error) {
  const code = error && error.code ? error.code + ": " : "";
  return el("div", { class: "error-box", role: "alert" },
    code + (error && error.message ? error.message : String(error)));
}

export function toDate(value) {
  if (value === undefined || value === null || value === "") return null;
  if (typeof value === "number") return new Date(value > 1e12 ? value : value * 1000);
  const date = new Date(value);
  return Number.isNaN(date.getTime()) ? null : date;
}

export function fmtTime(value) {
  const date = toDate(value);
  if (!date) return value ? String(value) : "";
  const now = new Date();
  const sameDay = date.toDateString() === now.toDateString();
  return sameDay ? date.toLocaleTimeString() : date.toLocaleString();
}

export function fmtMs(ms) {
  if (ms === undefined || ms === null) return "running";
  if (ms < 1) return ms.toFixed(2) + " ms";
  if (ms < 1000) return Math.round(ms) + " ms";
  if (ms < 60000) return (ms / 1000).toFixed(ms < 10000 ? 2 : 1) + " s";
  return (ms / 60000).toFixed(1) + " min";
}

export function fmtJson(value) {
  try {
    return JSON.stringify(value, null, 2);
  } catch (_) {
    return String(value);
  }
}

export function statusTag(status) {
  return el("span", { class: "status status-" + String(status || "unknown") }, status || "unknown");
}

export function link(href, text, attrs) {
  return el("a", Object.assign({ href: withToken(href), "data-nav": true }, attrs || {}), text);
}

export function quotePath(...parts) {
  return parts.map((part) => encodeURIComponent(part)).join("/");
}

// ---------------------------------------------------------------- live streams

// At most one page stream (a conversation) plus the overview stream; both closed on navigation.
const streams = { overview: null, page: null };
const overviewListeners = new Set();
let lastOverview = null;
let router = null;

// A page's listener for overview events (dropped when the page is left).
export function onOverview(listener) {
  overviewListeners.add(listener);
}

// The page's own event stream (a conversation's); closed when the page is left.
export function setPageStream(source) {
  streams.page = source;
}

export function setOverview(overview) {
  lastOverview = overview;
  updateApprovalBadge(overview);
}

// Leaving a page: its stream and its overview listeners end.
export function leavePage() {
  if (streams.page) {
    streams.page.close();
    streams.page = null;
  }
  overviewListeners.clear();
}

export function openStream(path, handlers) {
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

export function startOverviewStream() {
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

export function updateApprovalBadge(overview) {
  let pending = 0;
  for (const swarm of (overview && overview.swarms) || []) pending += swarm.pendingApprovals || 0;
  approvalCount.hidden = pending === 0;
  approvalCount.textContent = String(pending);
  approvalCount.setAttribute("aria-label", pending + " pending");
}

// ---------------------------------------------------------------- navigation

export function setRouter(fn) {
  router = fn;
}

// Render the current location again (e.g. after a conversation file was rewritten).
export function rerender() {
  return router();
}

export function navigate(href) {
  history.pushState(null, "", href);
  router().then(() => main.focus({ preventScroll: true }));
  window.scrollTo(0, 0);
}

export function mark(page, started, fetched, count) {
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
