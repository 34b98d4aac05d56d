// Traces: the recent list (/traces) and one trace's waterfall (/traces/<traceId>).

import {
  api, el, errorBox, fmtMs, fmtTime, link, main, mark, navigate, statusTag, withToken,
} from "./core.js";

// ---------------------------------------------------------------- traces

export async function renderTraceList(view, _params, isCurrent) {
  view.dataset.title = "Traces";
  const data = await api("/api/traces?limit=50");
  if (!isCurrent()) return;
  view.append(el("h1", null, "Traces"), traceIdForm());
  if (data.note) view.append(el("p", { class: "muted", id: "trace-note" }, data.note));
  const traces = data.traces || [];
  if (!traces.length) {
    view.append(el("p", { class: "muted" }, "No trace recorded yet."));
  } else {
    const rows = traces.map((t) => el("tr", { class: t.error ? "error" : null },
      el("td", { "data-label": "trace" }, link("/traces/" + encodeURIComponent(t.traceId),
        t.traceId.slice(0, 16), { class: "mono" })),
      el("td", { "data-label": "root" }, t.rootName || ""),
      el("td", { "data-label": "agents" }, (t.agents || []).join(", ")),
      el("td", { "data-label": "started" }, fmtTime(t.startedAt)),
      el("td", { "data-label": "duration", class: "num" }, fmtMs(t.durationMs)),
      el("td", { "data-label": "spans", class: "num" }, t.spanCount ?? ""),
      el("td", { "data-label": "tokens", class: "num" }, t.tokenUsage
        ? (t.tokenUsage.prompt ?? 0) + "→" + (t.tokenUsage.completion ?? 0) : ""),
      el("td", { "data-label": "cost", class: "num" },
        typeof t.cost === "number" ? "$" + t.cost.toFixed(6) : "–"),
      el("td", { "data-label": "status" }, t.error ? statusTag("error") : statusTag("ok"))));
    view.append(el("div", { class: "table-wrap panel" }, el("table", { class: "stack" },
      el("thead", null, el("tr", null, el("th", null, "Trace"), el("th", null, "Root"),
        el("th", null, "Agents"), el("th", null, "Started"), el("th", { class: "num" }, "Duration"),
        el("th", { class: "num" }, "Spans"), el("th", { class: "num" }, "Tokens"),
        el("th", { class: "num" }, "Cost"), el("th", null, "Status"))),
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
  const facts = [span.status === "waiting" ? "waiting for approval" : fmtMs(span.durationMs)];
  const input = a.inputTokens ?? a.promptTokens;
  const output = a.outputTokens ?? a.completionTokens;
  if (input || output || (span.kind === "llm" && input !== undefined)) {
    facts.push(`${input ?? 0}→${output ?? 0} tok`);
  }
  if (typeof a.costUsd === "number") facts.push("$" + a.costUsd.toFixed(a.costUsd < 0.01 ? 6 : 4));
  return facts.join(" · ");
}

export async function renderTrace(view, params, isCurrent) {
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
    const running = s.durationMs === null || s.durationMs === undefined;
    const end = running ? now : s.startMs + s.durationMs;
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
    errors ? el("span", { class: "status status-error" },
      errors + " error" + (errors > 1 ? "s" : ""))
      : null),
  el("div", { class: "legend", "aria-hidden": "true" }, ...KINDS.map((k) =>
    el("span", null, el("i", { class: "k-" + k }), k))));
  const rows = spanTree(spans);
  const waterfall = el("div", { class: "waterfall", role: "list", "aria-label": "Span waterfall" });
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
    class: "wf-row" + (isError ? " error" : "") + (span.status === "waiting" ? " waiting" : ""),
    role: "listitem",
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
