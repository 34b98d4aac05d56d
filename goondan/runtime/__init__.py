"""The agent runtime and its embedding API.

::

    from goondan import Runtime

    async with Runtime.from_bundle("examples/quickstart", state_root="/tmp/state") as rt:
        result = await rt.run_turn("assistant", "What is 12 km in miles?", instance_key="demo")
        print(result.text)

    # or, without asyncio
    with Runtime.from_bundle("examples/quickstart") as rt:
        print(rt.run_turn_sync(None, "hi").text)       # None = the swarm's entry agent

Everything runs in this process: no subprocess is spawned and nothing is written outside
``state_root`` (default: ``--state-root`` / ``GOONDAN_STATE_ROOT`` / ``~/.goondan``).
``rt.subscribe(callback)`` receives every runtime event payload (``turn.started`` …
``tool.failed`` and ``llm.delta`` for streamed text) of every instance.

An instance whose last turn was interrupted (the process died) resumes that turn when it is
opened (docs/conversations.md "Durability"); ``resume_interrupted=False`` repairs it with
``E_TURN_INTERRUPTED`` tool results instead, as before.

Agent-to-agent calls (``agents__request`` and friends, ``ctx.agents``) run in process through an
:class:`~goondan.runtime.local_router.InProcessAgentRouter`: the target (agent, instanceKey) is
opened on first use as its own :class:`AgentInstance` (own store and lock), with the same call-stack
cycle detection and depth limit as under the orchestrator.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from goondan.errors import GoondanError
from goondan.pipeline.context import TurnResult
from goondan.runtime.agents import DEFAULT_MAX_DEPTH, SwarmCatalog
from goondan.runtime.budget import TraceBudgets
from goondan.runtime.ledger import Budget
from goondan.types import AgentEvent, JsonObject

if TYPE_CHECKING:
    from goondan.config import Bundle, SwarmSpec
    from goondan.llm.base import LanguageModel
    from goondan.runtime.instance import (
        AgentInstance,
        AgentsApiFactory,
        ModelFactory,
        OutgoingHandler,
    )
    from goondan.runtime.observe import EventListener
    from goondan.runtime.otlp_exporter import OtlpExporter
    from goondan.storage.contract import StorageBackend

__all__ = ["AgentInstance", "Runtime", "TurnResult"]


def __getattr__(name: str) -> Any:
    # AgentInstance (the turn loop, tools, extensions, models) is imported on first use, so a
    # process that needs only a submodule such as goondan.runtime.events — the orchestrator —
    # does not load the whole runtime (docs/runtime.md "Performance").
    if name == "AgentInstance":
        from goondan.runtime.instance import AgentInstance

        return AgentInstance
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class Runtime:
    """Runs a bundle's agents in this process; one :class:`AgentInstance` per (agent, key)."""

    def __init__(
        self,
        bundle: Bundle,
        *,
        state_root: Path,
        swarm: str | None = None,
        models: Mapping[str, LanguageModel] | None = None,
        model_factory: ModelFactory | None = None,
        env: Mapping[str, str] | None = None,
        stream: bool = True,
        agents_factory: AgentsApiFactory | None = None,
        on_outgoing: OutgoingHandler | None = None,
        max_agent_depth: int = DEFAULT_MAX_DEPTH,
        resume_interrupted: bool = True,
        storage: StorageBackend | None = None,
    ) -> None:
        from goondan.workspace.paths import workspace_id_for
        from goondan.workspace.record import record_bundle_workspace

        self.bundle = bundle
        self.state_root = Path(state_root)
        # Where instances and approvals live (docs/storage.md); None: the JSONL state root.
        self.storage = storage
        self.swarm: SwarmSpec = bundle.swarm_spec(swarm)
        self.workspace_id = workspace_id_for(bundle.root, bundle.package_name)
        record_bundle_workspace(bundle, self.state_root)  # so inspect can mask from anywhere
        self.models = dict(models or {})
        self.model_factory = model_factory
        self.env = dict(os.environ if env is None else env)
        self.stream = stream
        # An explicit factory replaces the in-process router for every instance (legacy hook).
        self.agents_factory = agents_factory
        self.on_outgoing = on_outgoing
        from goondan.runtime.local_router import InProcessAgentRouter

        self.router = InProcessAgentRouter(
            SwarmCatalog(self.swarm.name, self.swarm.entry_agent, tuple(self.swarm.agents)),
            create_instance=self._create_for_router,
            max_depth=max_agent_depth,
            request_timeout_for=self._request_timeout_for,
        )
        # Trace-wide budgets (docs/observability.md "Budgets"), checked by the router.
        self.budgets = TraceBudgets({
            name: Budget.from_dicts(getattr(self._agent_spec_or_none(name), "budget", None))
            for name in self.swarm.agents
        }, default=Budget.from_dicts(self.swarm.budget))
        if self.budgets.active:
            self.router.admit = self.budgets.admit
        # OTLP export of every instance's spans when an endpoint is configured
        # (docs/observability.md "OTLP export"); flushed by aclose().
        from goondan.otlp import endpoint_configured

        self.exporter: OtlpExporter | None = None
        if endpoint_configured(self.env):
            from goondan.runtime.otlp_exporter import exporter_from_env

            self.exporter = exporter_from_env(
                self.env, resource_attributes={"goondan.swarm": self.swarm.name}
            )
        self._listeners: list[EventListener] = []
        self.resume_interrupted = resume_interrupted
        self._resuming: set[asyncio.Task[TurnResult | None]] = set()  # interrupted turns going on
        from goondan.runtime.approvals import RuntimeApprovals

        self.approvals = RuntimeApprovals(self)  # docs/approvals.md "Embedding"
        self._runner: asyncio.Runner | None = None
        self._closed = False

    @classmethod
    def from_bundle(
        cls,
        path: str | os.PathLike[str],
        *,
        state_root: str | os.PathLike[str] | None = None,
        swarm: str | None = None,
        models: Mapping[str, LanguageModel] | None = None,
        model_factory: ModelFactory | None = None,
        env: Mapping[str, str] | None = None,
        stream: bool = True,
        max_agent_depth: int = DEFAULT_MAX_DEPTH,
        resume_interrupted: bool = True,
        storage: StorageBackend | None = None,
    ) -> Runtime:
        """Load and validate the bundle at ``path`` (raises ``BundleError``/``ConfigError``).

        ``models`` maps an agent name (or a Model resource name) to a ready
        :class:`LanguageModel` — handy for tests with ``ScriptedModel``; ``model_factory``
        replaces ``goondan.llm.create_model`` for every other agent. ``resume_interrupted``:
        see the module docstring. ``storage``: the backend that holds the instances and
        approvals (:mod:`goondan.storage`; default: the JSONL state root).
        """
        from goondan.config.cache import load_bundle_cached
        from goondan.workspace.paths import resolve_state_root

        environ = os.environ if env is None else env
        root = resolve_state_root(str(state_root) if state_root is not None else None, environ)
        # A validated bundle whose inputs are all unchanged is reused (docs/bundle-cache.md).
        bundle = load_bundle_cached(Path(path), state_root=root, env=environ)
        return cls(
            bundle,
            state_root=root,
            swarm=swarm,
            models=models,
            model_factory=model_factory,
            env=env,
            stream=stream,
            max_agent_depth=max_agent_depth,
            resume_interrupted=resume_interrupted,
            storage=storage,
        )

    # -- instances ---------------------------------------------------------------------------------
    @property
    def entry_agent(self) -> str:
        """The swarm's entry agent (used when ``agent`` is None)."""
        return self.swarm.entry_agent

    @property
    def default_instance_key(self) -> str:
        """The conversation key used when none is given: the swarm's instance key."""
        return self.swarm.instance_key

    @property
    def _instances(self) -> dict[tuple[str, str], Any]:
        return self.router.instances

    async def instance(
        self, agent: str | None = None, instance_key: str | None = None
    ) -> AgentInstance:
        """The (opened on first use) instance of ``agent`` for ``instance_key``."""
        self._check_open()
        name = agent or self.entry_agent
        instance: AgentInstance = await self.router.instance(
            name, instance_key or self.default_instance_key
        )
        return instance

    def _request_timeout_for(self, agent: str) -> int | None:
        """The Agent's ``spec.requestTimeoutMs`` (default wait of its agent requests)."""
        resource = self.bundle.get("Agent", agent)
        value = resource.spec.get("requestTimeoutMs") if resource is not None else None
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    async def _create_for_router(
        self, agent: str, instance_key: str, *, agents_factory: AgentsApiFactory,
        on_outgoing: OutgoingHandler, workdir: str | None = None,
    ) -> AgentInstance:
        self._check_open()

        async def outgoing(event: AgentEvent) -> None:
            await on_outgoing(event)  # resolves an in-process request waiting for this answer
            if self.on_outgoing is not None:
                await self.on_outgoing(event)

        return await self._open(
            agent, instance_key,
            agents_factory=self.agents_factory or agents_factory,
            on_outgoing=outgoing,
            workdir=Path(workdir) if workdir else None,
        )

    async def _open(
        self, agent: str, instance_key: str, *, agents_factory: AgentsApiFactory | None,
        on_outgoing: OutgoingHandler | None, workdir: Path | None,
    ) -> AgentInstance:
        spec = self.bundle.agent_spec(agent, swarm=self.swarm.name)
        model = self.models.get(agent) or self.models.get(spec.model.name)
        if workdir is not None and not workdir.is_absolute():
            workdir = self.bundle.root / workdir
        from goondan.runtime.instance import AgentInstance

        instance = await AgentInstance.open(
            spec,
            state_root=self.state_root,
            workspace_id=self.workspace_id,
            instance_key=instance_key,
            model=model,
            model_factory=self.model_factory,
            env=self.env,
            max_steps_per_turn=spec.max_steps_per_turn or self.swarm.max_steps_per_turn,
            workdir=workdir,
            agents_factory=agents_factory,
            on_outgoing=on_outgoing,
            stream=self.stream,
            resume_interrupted=self.resume_interrupted,
            storage=self.storage,
        )
        instance.subscribe(self._dispatch)
        if self.budgets.active:
            instance.observer.add_sink(self.budgets)
        if self.exporter is not None:
            instance.observer.add_sink(self.exporter)
        if instance.interrupted is not None or instance.parked is not None:
            # Goes on now (a parked turn: if a decision was stored meanwhile, docs/approvals.md);
            # the next turn of this instance waits for it (AgentInstance.run).
            task = asyncio.ensure_future(instance.resume())
            self._resuming.add(task)
            task.add_done_callback(self._resume_done)
        return instance

    def _resume_done(self, task: asyncio.Task[TurnResult | None]) -> None:
        self._resuming.discard(task)
        if not task.cancelled() and task.exception() is not None:
            import logging

            logging.getLogger("goondan.runtime").error("resuming an interrupted turn failed: %s",
                                                       task.exception())

    def _agent_spec_or_none(self, agent: str) -> Any:
        try:
            return self.bundle.agent_spec(agent, swarm=self.swarm.name)
        except GoondanError:
            return None

    def _dispatch(self, payload: JsonObject) -> None:
        for listener in tuple(self._listeners):
            listener(payload)

    # -- turns -------------------------------------------------------------------------------------
    async def run_turn(
        self,
        agent: str | None,
        text: str,
        *,
        instance_key: str | None = None,
        metadata: JsonObject | None = None,
    ) -> TurnResult:
        """Run one turn of ``agent`` (None = entry agent) with user input ``text``."""
        instance = await self.instance(agent, instance_key)
        event = AgentEvent(
            type="message",
            input=text,
            instance_key=instance.instance_key,
            source={"kind": "connector", "name": "embedding"},
            metadata=dict(metadata or {}),
        )
        return await instance.run(event)

    async def run_event(self, agent: str | None, event: AgentEvent) -> TurnResult:
        """Run one turn for a fully built :class:`AgentEvent`."""
        instance = await self.instance(agent, event.instance_key)
        return await instance.run(event)

    def run_turn_sync(
        self,
        agent: str | None,
        text: str,
        *,
        instance_key: str | None = None,
        metadata: JsonObject | None = None,
    ) -> TurnResult:
        """Blocking :meth:`run_turn` for code without an event loop (one private loop is kept)."""
        result: TurnResult = self._run_sync(
            self.run_turn(agent, text, instance_key=instance_key, metadata=metadata)
        )
        return result

    def _run_sync(self, coro: Any) -> Any:
        if self._runner is None:
            self._runner = asyncio.Runner()
        return self._runner.run(coro)

    # -- events ------------------------------------------------------------------------------------
    def subscribe(self, callback: Callable[[JsonObject], Any]) -> Callable[[], None]:
        """Call ``callback(payload)`` for every runtime event of every instance; returns
        unsubscribe."""
        self._listeners.append(callback)

        def unsubscribe() -> None:
            if callback in self._listeners:
                self._listeners.remove(callback)

        return unsubscribe

    # -- lifecycle ---------------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            from goondan.errors import AgentError

            raise AgentError(
                "this Runtime has been closed", code="E_AGENT_DRAINING",
                suggestion="Create a new Runtime with Runtime.from_bundle(...).",
            )

    async def aclose(self) -> None:
        """Finish running turns, fold, save extension state and release every instance."""
        if self._closed:
            return
        self._closed = True
        # Fire-and-forget turns (agents__send) and resumed turns finish first; they may still
        # call other agents.
        while self._resuming:
            await asyncio.gather(*self._resuming, return_exceptions=True)
        await self.router.drain_tasks()
        instances = list(self._instances.values())
        self._instances.clear()
        errors: list[BaseException] = []
        for instance in instances:
            try:
                await instance.close()
            except Exception as exc:  # close the others anyway
                errors.append(exc)
        if self.exporter is not None:  # the shutdown flush
            await asyncio.to_thread(self.exporter.close)
        if errors:
            raise errors[0]

    def close(self) -> None:
        """Synchronous :meth:`aclose` (for code that used :meth:`run_turn_sync`)."""
        try:
            if not self._closed and self._instances:
                self._run_sync(self.aclose())
            self._closed = True
        finally:
            if self._runner is not None:
                self._runner.close()
                self._runner = None

    async def __aenter__(self) -> Runtime:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __enter__(self) -> Runtime:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"Runtime(bundle={str(self.bundle.root)!r}, swarm={self.swarm.name!r}, "
            f"instances={len(self._instances)})"
        )
