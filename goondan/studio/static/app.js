// goondan studio: one page, routed on location.pathname, no build step, no dependencies.
// Each page lives in its own module; core.js holds what they share.

import {
  el, errorBox, leavePage, main, navigate, setRouter, startOverviewStream, withToken,
} from "./core.js";
import { renderSwarms, renderWorkspaces } from "./swarms.js";
import { renderConversation } from "./conversation.js";
import { renderTrace, renderTraceList } from "./traces.js";
import { renderApprovals } from "./approvals.js";

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
  leavePage();
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

document.addEventListener("click", (event) => {
  if (event.defaultPrevented || event.button !== 0) return;
  if (event.metaKey || event.ctrlKey || event.shiftKey || event.altKey) return;
  const a = event.target.closest("a[data-nav]");
  if (!a || a.origin !== location.origin) return;
  event.preventDefault();
  navigate(a.getAttribute("href"));
});
window.addEventListener("popstate", () => route());

setRouter(route);

// The header's links keep a ?token= of the page's address, like every other link.
for (const a of document.querySelectorAll("a[data-nav]")) {
  a.href = withToken(a.getAttribute("href"));
}

// ---------------------------------------------------------------- start

route().then(() => {
  // Live overview updates start only after the first page is on screen.
  startOverviewStream();
});
