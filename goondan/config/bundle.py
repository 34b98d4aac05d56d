"""The validated bundle and the resolved views the runtime consumes.

A :class:`Bundle` is only built from a bundle without errors, so the accessors here can trust
the shapes the schema enforced. ``agent_spec`` / ``swarm_spec`` resolve references, selectors
(with overrides), extension config merges and defaults (docs/configuration.md "Kinds").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from goondan.config.envelope import Resource, agent_prompt, deep_merge
from goondan.config.refs import ObjectRef, RefItem, parse_ref, parse_ref_item
from goondan.config.resolve import Index
from goondan.config.schema import Checker
from goondan.config.sourcefile import read_regular_file
from goondan.config.values import env_names, resolve_value
from goondan.errors import ConfigError, Diagnostic

if TYPE_CHECKING:
    from goondan.config.a2a import A2aAgentSpec
    from goondan.config.mcp import McpServerSpec

__all__ = [
    "DEFAULT_ERROR_MESSAGE_LIMIT",
    "DEFAULT_MAX_STEPS_PER_TURN",
    "DEFAULT_SHUTDOWN_GRACE_MS",
    "DEFAULT_TOOL_TIMEOUT_MS",
    "AgentSpec",
    "Bundle",
    "ExtensionBinding",
    "ModelBinding",
    "SwarmSpec",
    "ToolBinding",
    "ToolExport",
]

DEFAULT_MAX_STEPS_PER_TURN = 32
DEFAULT_ERROR_MESSAGE_LIMIT = 1000
DEFAULT_TOOL_TIMEOUT_MS = 120_000
DEFAULT_SHUTDOWN_GRACE_MS = 30_000
MAX_PROMPT_BYTES = 1024 * 1024  # a systemRef file; larger ones are refused, never read whole


@dataclass
class ModelBinding:
    """A Model resource as the LLM layer needs it; ``api_key`` is the raw ValueSource."""

    name: str
    provider: str
    model: str
    api_key: dict[str, Any] | None = None
    endpoint: str | None = None
    options: dict[str, Any] = field(default_factory=dict)
    capabilities: dict[str, bool] = field(default_factory=dict)
    timeout_ms: int | None = None
    # scripted Models of the same bundle, named by a missing-key error as the offline way
    offline_alternatives: list[str] = field(default_factory=list)
    # spec.pricing: {inputPerMTok, outputPerMTok, cachedInputPerMTok?} (docs/observability.md).
    pricing: dict[str, float] = field(default_factory=dict)

    def resolve_api_key(self, env: Mapping[str, str]) -> tuple[str | None, str | None]:
        """``(key or None, environment variable name or None)``; the key is registered as a
        secret."""
        names = env_names(self.api_key, field="apiKey")
        return resolve_value(self.api_key, env, field="apiKey"), (names[0] if names else None)

    def __repr__(self) -> str:  # never show a literal key
        return f"ModelBinding(name={self.name!r}, provider={self.provider!r}, model={self.model!r})"


@dataclass
class ToolExport:
    """One function of a Tool, offered to the model as ``<tool>__<export>``."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})
    # docs/approvals.md: "required" asks a person before each call; the Agent's reference
    # overrides it for every export of the Tool.
    approval: str = "never"
    approval_timeout_ms: int | None = None
    # re-run after a crash instead of E_TOOL_OUTCOME_UNKNOWN (docs/tools.md)
    idempotent: bool = False


@dataclass
class ToolBinding:
    """A Tool resource with its entry module resolved to an absolute path."""

    name: str
    package: str | None
    entry: Path
    exports: list[ToolExport]
    error_message_limit: int = DEFAULT_ERROR_MESSAGE_LIMIT
    timeout_ms: int = DEFAULT_TOOL_TIMEOUT_MS
    root: Path = Path()
    # Tool spec.config deep-merged with the Agent reference's config (ToolContext.config).
    config: dict[str, Any] = field(default_factory=dict)
    max_output_bytes: int | None = None


@dataclass
class ExtensionBinding:
    """An Extension as an Agent uses it: entry path and merged ``config`` (docs/configuration.md
    "Extension")."""

    name: str
    package: str | None
    entry: Path
    config: dict[str, Any]
    root: Path


@dataclass
class SwarmSpec:
    """A Swarm with defaults applied; ``agents`` are names."""

    name: str
    entry_agent: str
    agents: list[str]
    instance_key: str
    max_steps_per_turn: int
    shutdown_grace_ms: int
    resource: Resource
    # spec.policy.budget (docs/observability.md "Budgets").
    budget: dict[str, Any] = field(default_factory=dict)
    idle_timeout_ms: int | None = None  # policy.idleTimeoutMs: release idle instances
    ray_hosts: int | None = None  # policy.ray.hosts: host actors of the Ray engine
    # policy.isolation (None: not set, GOONDAN_ISOLATION or process) and policy.pool.hosts.
    isolation: str | None = None
    pool_hosts: int | None = None


@dataclass
class AgentSpec:
    """Everything needed to run one Agent."""

    name: str
    model: ModelBinding
    params: dict[str, Any]
    system_prompt: str
    tools: list[ToolBinding]
    extensions: list[ExtensionBinding]
    required_tools: list[str]
    parallel_tool_calls: bool
    workdir: Path
    max_steps_per_turn: int
    resource: Resource
    # spec.requestTimeoutMs: how long agents__request waits by default (None: 60 s).
    request_timeout_ms: int | None = None
    max_tool_output_bytes: int | None = None
    spill_tool_output: bool = False
    # The Swarm's policy.budget overridden key by key by the Agent's spec.budget.
    budget: dict[str, Any] = field(default_factory=dict)
    # Tool resources with spec.mcp: MCP servers started by the instance (docs/mcp.md).
    mcp_servers: list[McpServerSpec] = field(default_factory=list)
    a2a_agents: list[A2aAgentSpec] = field(default_factory=list)   # Tool resources with spec.a2a
    # spec.inputPolicy: "steer" appends input that arrives mid-turn to the running turn.
    input_policy: str = "queue"


def _silent() -> Checker:
    return Checker(None, None)


@dataclass
class Bundle:
    """A loaded, validated bundle (dependencies' resources first, then local ones)."""

    root: Path
    package_name: str | None
    resources: list[Resource]
    warnings: list[Diagnostic] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._index = Index(self.resources, self.package_name)

    def get(self, kind: str, name: str, *, package: str | None = None) -> Resource | None:
        """The resource ``kind/name`` (unscoped lookup, docs/configuration.md "References", unless
        ``package``)."""
        return self._index.resolve(ObjectRef(kind, name, package), None).resource

    def of_kind(self, kind: str) -> list[Resource]:
        """Every resource of ``kind`` in load order."""
        return self._index.of_kind(kind)

    def resolve(self, ref: ObjectRef, referrer: Resource | None) -> Resource | None:
        """Resolve a parsed reference as seen from ``referrer``."""
        return self._index.resolve(ref, referrer).resource

    def resolve_items(self, items: list[Any], kind: str, referrer: Resource,
                      *, field_path: tuple[str | int, ...] = ()) -> list[tuple[Resource, RefItem]]:
        """Resolve a ``tools``/``extensions``/``agents`` list, expanding selectors."""
        out: list[tuple[Resource, RefItem]] = []
        for i, raw in enumerate(items):
            item = parse_ref_item(
                raw,
                (*field_path, i),
                _silent(),
                kind,
                allow_config=kind in ("Extension", "Tool"),
                bare_name=kind == "Agent",
            )
            if item is None:
                continue
            if item.selector is not None:
                out.extend((res, item) for res in self._index.select(item.selector, referrer))
            elif item.ref is not None:
                found = self._index.resolve(item.ref, referrer).resource
                if found is not None:
                    out.append((found, item))
        return out

    # --- swarm / agent views -------------------------------------------------------------

    def swarm_spec(self, name: str | None = None) -> SwarmSpec:
        """The Swarm to run: ``name``, else the one named ``default``, else the only one."""
        swarms = self.of_kind("Swarm")
        if name is not None:
            chosen = next((s for s in swarms if s.name == name), None)
            if chosen is None:
                known = ", ".join(s.name for s in swarms) or "none"
                raise ConfigError(
                    f"Swarm {name!r} not found (swarms: {known})",
                    code="E_CONFIG_SWARM_NOT_FOUND",
                    suggestion="pass an existing --swarm",
                )
        else:
            local = [s for s in swarms if s.package is None] or swarms
            chosen = next((s for s in local if s.name == "default"), None)
            if chosen is None and len(local) == 1:
                chosen = local[0]
            if chosen is None:
                if not local:
                    raise ConfigError("the bundle defines no Swarm", code="E_CONFIG_NO_SWARM",
                                      suggestion="add a 'kind: Swarm' resource listing the agents")
                raise ConfigError(
                    f"several Swarms and none named 'default': {', '.join(s.name for s in local)}",
                    code="E_CONFIG_NO_SWARM", suggestion="choose one with --swarm <name>")
        return self._swarm(chosen)

    def _swarm(self, res: Resource) -> SwarmSpec:
        spec = res.spec
        agents = [r.name for r, _ in self.resolve_items(spec.get("agents") or [], "Agent", res)]
        entry = parse_ref(spec.get("entryAgent"), (), _silent(), ("Agent",), bare_name_kind="Agent")
        entry_res = self._index.resolve(entry, res).resource if entry else None
        policy = spec.get("policy") or {}
        grace = (policy.get("shutdown") or {}).get("gracePeriodSeconds")
        return SwarmSpec(
            name=res.name,
            entry_agent=entry_res.name if entry_res else (agents[0] if agents else ""),
            agents=agents,
            instance_key=spec.get("instanceKey") or res.name,
            max_steps_per_turn=int(policy.get("maxStepsPerTurn") or DEFAULT_MAX_STEPS_PER_TURN),
            shutdown_grace_ms=int(grace * 1000) if grace else DEFAULT_SHUTDOWN_GRACE_MS,
            resource=res,
            budget=dict(policy.get("budget") or {}),
            idle_timeout_ms=int(policy["idleTimeoutMs"]) if policy.get("idleTimeoutMs") else None,
            ray_hosts=int((policy.get("ray") or {}).get("hosts") or 0) or None,
            isolation=str(policy["isolation"]) if policy.get("isolation") else None,
            pool_hosts=int((policy.get("pool") or {}).get("hosts") or 0) or None,
        )

    def agent_spec(self, name: str, *, swarm: str | None = None) -> AgentSpec:
        """The resolved Agent ``name``; ``max_steps_per_turn`` comes from the Swarm's policy."""
        res = self.get("Agent", name)
        if res is None:
            known = ", ".join(a.name for a in self.of_kind("Agent")) or "none"
            raise ConfigError(f"Agent {name!r} not found (agents: {known})",
                              code="E_CONFIG_AGENT_NOT_FOUND", suggestion="check the agent name")
        max_steps = DEFAULT_MAX_STEPS_PER_TURN
        swarm_budget: dict[str, Any] = {}
        try:
            swarm_spec: SwarmSpec | None = self.swarm_spec(swarm)
        except ConfigError:
            if swarm is not None:
                raise
            swarm_spec = None
        if swarm_spec is not None:
            if name not in swarm_spec.agents and swarm is not None:
                raise ConfigError(
                    f"Agent {name!r} is not part of Swarm {swarm_spec.name!r}",
                    code="E_CONFIG_AGENT_NOT_FOUND",
                    suggestion=f"add it to the Swarm's agents: {', '.join(swarm_spec.agents)}",
                )
            max_steps = swarm_spec.max_steps_per_turn
            swarm_budget = swarm_spec.budget
        agent = self._agent(res, max_steps)
        agent.budget = {**swarm_budget, **(res.spec.get("budget") or {})}
        return agent

    def _agent(self, res: Resource, max_steps: int) -> AgentSpec:
        spec = res.spec
        model_config = spec.get("modelConfig") or {}
        model_ref = parse_ref(model_config.get("modelRef"), (), _silent(), ("Model",))
        model_res = self._index.resolve(model_ref, res).resource if model_ref else None
        if model_res is None:
            raise ConfigError(f"Agent {res.name!r}: model not found", code="E_CONFIG_REF_NOT_FOUND")
        tools: list[ToolBinding] = []
        mcp_servers: list[McpServerSpec] = []
        a2a_agents: list[A2aAgentSpec] = []
        for t, item in self.resolve_items(spec.get("tools") or [], "Tool", res):
            if "a2a" in t.spec:
                from goondan.config.a2a import a2a_agent_spec

                a2a_agents.append(a2a_agent_spec(t.name, t.package, t.spec, t.root))
            elif "mcp" in t.spec:
                from goondan.config.mcp import mcp_server_spec

                server = mcp_server_spec(t.name, t.package, t.spec, t.root)
                server.approval = item.approval or "never"
                server.approval_timeout_ms = item.approval_timeout_ms
                mcp_servers.append(server)
            else:
                tools.append(self.tool_binding(t, item.config, approval=item.approval,
                                               approval_timeout_ms=item.approval_timeout_ms))
        extensions = [
            self.extension_binding(e, item.config)
            for e, item in self.resolve_items(spec.get("extensions") or [], "Extension", res)
        ]
        workdir = Path(spec.get("workdir") or ".")
        return AgentSpec(
            name=res.name,
            model=self._with_offline(self.model_binding(model_res)),
            params=dict(model_config.get("params") or {}),
            system_prompt=self.system_prompt(res),
            tools=tools,
            extensions=extensions,
            required_tools=list(spec.get("requiredTools") or []),
            parallel_tool_calls=bool(spec.get("parallelToolCalls", False)),
            workdir=(res.root / workdir).resolve() if not workdir.is_absolute() else workdir,
            max_steps_per_turn=max_steps,
            resource=res,
            request_timeout_ms=spec.get("requestTimeoutMs"),
            max_tool_output_bytes=spec.get("maxToolOutputBytes"),
            spill_tool_output=bool(spec.get("spillToolOutput", False)),
            mcp_servers=mcp_servers,
            a2a_agents=a2a_agents,
            input_policy=str(spec.get("inputPolicy") or "queue"),
        )

    def system_prompt(self, agent: Resource) -> str:
        """The inline prompt then the ``systemRef`` file's content, joined by a blank line
        (``prompts.systemPrompt`` or ``prompt.system``; empty when the Agent has none)."""
        _, inline, ref = agent_prompt(agent.spec)
        parts = []
        if inline is not None:
            parts.append(inline)
        if ref is not None:
            raw = read_regular_file(agent.root / ref, limit=MAX_PROMPT_BYTES)
            parts.append(raw.decode("utf-8", errors="replace"))
        return "\n\n".join(parts)

    def _with_offline(self, binding: ModelBinding) -> ModelBinding:
        if binding.provider != "scripted":
            binding.offline_alternatives = [
                r.name
                for r in self.resources
                if r.kind == "Model"
                and isinstance(r.spec, dict)
                and r.spec.get("provider") == "scripted"
            ]
        return binding

    @staticmethod
    def model_binding(res: Resource) -> ModelBinding:
        """The :class:`ModelBinding` of a Model resource."""
        spec = res.spec
        return ModelBinding(
            name=res.name,
            provider=spec["provider"],
            model=spec["model"],
            api_key=spec.get("apiKey"),
            endpoint=spec.get("endpoint"),
            options=dict(spec.get("options") or {}),
            capabilities=dict(spec.get("capabilities") or {}),
            timeout_ms=spec.get("timeoutMs"),
            pricing=dict(spec.get("pricing") or {}),
        )

    @staticmethod
    def tool_binding(
        res: Resource,
        agent_config: dict[str, Any] | None = None,
        *,
        approval: str | None = None,
        approval_timeout_ms: int | None = None,
    ) -> ToolBinding:
        """The :class:`ToolBinding` of a Tool resource (entry made absolute, ``spec.config``
        deep-merged with the Agent reference's ``config``; the reference's ``approval`` and
        ``approvalTimeoutMs``, when given, replace every export's)."""
        spec = res.spec
        exports = [
            ToolExport(
                name=e["name"],
                description=e.get("description") or "",
                parameters=dict(e.get("parameters") or {"type": "object", "properties": {}}),
                approval=approval or e.get("approval") or "never",
                approval_timeout_ms=approval_timeout_ms or e.get("approvalTimeoutMs"),
                idempotent=e.get("idempotent") is True,
            )
            for e in spec.get("exports") or []
        ]
        return ToolBinding(
            name=res.name,
            package=res.package,
            entry=(res.root / spec["entry"]).absolute(),
            exports=exports,
            error_message_limit=spec.get("errorMessageLimit", DEFAULT_ERROR_MESSAGE_LIMIT),
            timeout_ms=spec.get("timeoutMs", DEFAULT_TOOL_TIMEOUT_MS),
            root=res.root,
            config=deep_merge(spec.get("config") or {}, agent_config or {}),
            max_output_bytes=spec.get("maxOutputBytes"),
        )

    @staticmethod
    def extension_binding(
        res: Resource, agent_config: dict[str, Any] | None = None
    ) -> ExtensionBinding:
        """The :class:`ExtensionBinding` with ``spec.config`` deep-merged with the Agent's
        config."""
        config = deep_merge(res.spec.get("config") or {}, agent_config or {})
        return ExtensionBinding(res.name, res.package, (res.root / res.spec["entry"]).absolute(),
                                config, res.root)

    def watched_files(self) -> list[Path]:
        """YAML files, entry files and systemRef files, for ``--watch`` (sorted, unique)."""
        out = {p.absolute() for p in self.files}
        for res in self.resources:
            entry = res.spec.get("entry")
            if isinstance(entry, str):
                path = (res.root / entry).absolute()
                out.add(path / "__init__.py" if path.is_dir() else path)
            if res.kind == "Agent":
                ref = agent_prompt(res.spec)[2]
                if ref is not None:
                    out.add((res.root / ref).absolute())
        return sorted(out)

    def watched_signature(self) -> tuple[tuple[str, int, int], ...]:
        """``(path, mtime_ns, size)`` of each of :meth:`watched_files` (``-1, -1``: unreadable):
        equal as long as none of them changed — when a host may reuse this loaded bundle."""
        out = []
        for path in self.watched_files():
            try:
                st = path.stat()
                out.append((str(path), st.st_mtime_ns, st.st_size))
            except OSError:
                out.append((str(path), -1, -1))
        return tuple(out)
