// Approvals (/approvals): pending requests with their arguments, approve / deny with a reason.

import {
  api, el, errorBox, fmtJson, fmtTime, main, onOverview, statusTag, toDate,
} from "./core.js";

// ---------------------------------------------------------------- approvals

export async function renderApprovals(view, _params, isCurrent) {
  view.dataset.title = "Approvals";
  const data = await api("/api/approvals");
  if (!isCurrent()) return;
  const list = el("div", { class: "approvals" });
  const cards = new Map(); // id -> its card, kept across refreshes (a reason being typed stays)
  const decided = new Set(); // ids decided on this page: their cards stay, with the outcome
  const empty = el("p", { class: "muted empty" }, "No pending approvals.");
  const history = el("div", { class: "table-wrap" });
  const fill = (approvals) => {
    const shown = [];
    for (const approval of approvals) {
      if (approval.status !== "pending" && !decided.has(approval.id)) continue;
      if (!cards.has(approval.id)) cards.set(approval.id, approvalCard(approval, decided));
      shown.push(cards.get(approval.id));
    }
    for (const id of decided) {
      if (!shown.includes(cards.get(id))) shown.push(cards.get(id));
    }
    place(list, shown.length ? shown : [empty]);
    history.replaceChildren(decidedTable(approvals.filter((a) => a.status !== "pending")));
  };
  fill(data.approvals || []);
  view.append(el("h1", null, "Approvals"), list, el("h2", null, "Decided"), history);
  main.replaceChildren(view);
  let lastPending = null;
  onOverview(async (overview) => {
    let pending = 0;
    for (const swarm of overview.swarms || []) pending += swarm.pendingApprovals || 0;
    if (pending === lastPending) return;
    lastPending = pending;
    try {
      const fresh = await api("/api/approvals");
      if (isCurrent()) fill(fresh.approvals || []);
    } catch (_) {
      /* the next overview event retries */
    }
  });
}

// Make ``nodes`` the children of ``parent`` in order, moving only what must move: a card that
// stays where it is keeps its focus and what is typed into it.
function place(parent, nodes) {
  for (const child of [...parent.children]) {
    if (!nodes.includes(child)) child.remove();
  }
  let previous = null;
  for (const node of nodes) {
    const expected = previous ? previous.nextElementSibling : parent.firstElementChild;
    if (expected !== node) parent.insertBefore(node, expected);
    previous = node;
  }
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
      decided.add(approval.id);
      reason.disabled = true;
    } catch (error) {
      outcome.replaceChildren(errorBox(error));
      if (error.status !== 409) {
        approveBtn.disabled = false;
        denyBtn.disabled = false;
      } else {
        decided.add(approval.id);
      }
    }
  };
  approveBtn.addEventListener("click", () => decide("approve"));
  denyBtn.addEventListener("click", () => decide("deny"));
  return card;
}
