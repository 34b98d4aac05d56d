// The Swarms page (/) and the workspace list (/conversations): live via the overview stream.

import {
  api, el, fmtTime, link, main, onOverview, quotePath, setOverview, statusTag,
} from "./core.js";

// ---------------------------------------------------------------- swarms (/)

export async function renderSwarms(view, _params, isCurrent) {
  view.dataset.title = "Swarms";
  const overview = await api("/api/overview");
  if (!isCurrent()) return;
  setOverview(overview);
  const body = el("div");
  fillOverview(body, overview);
  view.append(el("h1", null, "Swarms"),
    el("p", { class: "muted" }, "State root ", el("code", null, overview.stateRoot || ""),
      overview.store ? " · store " : null,
      overview.store ? el("code", { id: "store" }, overview.store) : null), body);
  main.replaceChildren(view);
  onOverview((data) => fillOverview(body, data));
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
        inst.messageCount == null ? null
          : el("span", { class: "muted" }, inst.messageCount + " messages"),
        inst.updatedAt ? el("span", { class: "muted" }, "updated " + fmtTime(inst.updatedAt))
          : null,
        inst.error ? el("span", { class: "status status-error" }, inst.error) : null));
      section.append(el("div", { class: "agent-group" },
        el("h4", { style: "margin:0.3rem 0" }, agent), el("ul", null, ...items)));
    }
    if (!byAgent.size) section.append(el("p", { class: "muted" }, "No instances."));
    out.append(section);
  }
  return out;
}

export async function renderWorkspaces(view, _params, isCurrent) {
  view.dataset.title = "Conversations";
  const overview = await api("/api/overview");
  if (!isCurrent()) return;
  const body = el("div", null, workspaceList(overview.workspaces || []));
  view.append(el("h1", null, "Conversations"), body);
  main.replaceChildren(view);
  onOverview((data) => body.replaceChildren(workspaceList(data.workspaces || [])));
}
