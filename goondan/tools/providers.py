"""Tool providers: where the tools of one agent instance come from (docs/tools.md).

A :class:`ToolProvider` is opened once per agent instance, lists the tools it offers, runs calls
of them, and is closed with the instance. The :class:`~goondan.tools.registry.ToolRegistry`
sits in front of its providers: it indexes their tools by name (config tools win a name
clash), builds each step's catalog and hands the executor a
:class:`~goondan.tools.registry.RegisteredTool` per call, whose ``handler`` is what runs — for a
Python tool the module's own function, so dispatch costs no extra hop.

Implemented today:

* :class:`EntryModuleProvider` — one per ``kind: Tool`` resource (bundle tools and the tools of
  ``@goondan/base`` alike): the entry module's ``handlers`` for the declared exports;
* tools extensions register with ``api.tools.register`` go straight into the registry.

A remote source (an MCP client) is one more provider: its ``list_tools`` returns items with
``source.type == "mcp"`` and handlers that forward to :meth:`ToolProvider.call`; when the server
announces that its tool list changed, the provider calls the ``on_change`` callback it got in
:meth:`ToolProvider.open`, and the registry lists its tools again before the next step's
catalog is built (:meth:`~goondan.tools.registry.ToolRegistry.step_catalog`).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
import queue
import signal
import threading
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from goondan.errors import ToolLoadError
from goondan.tools.catalog import attr, binding_items
from goondan.tools.context import ToolContext
from goondan.tools.loader import load_entry_module
from goondan.tools.registry import (
    DEFAULT_ERROR_MESSAGE_LIMIT,
    DEFAULT_TIMEOUT_MS,
    RegisteredTool,
    build_tool,
)
from goondan.types import JsonObject, JsonValue

__all__ = [
    "ChangeListener",
    "EntryModuleProvider",
    "ToolProvider",
    "run_handler",
    "run_in_daemon_thread",
]

ChangeListener = Callable[["ToolProvider"], None]


class ToolProvider(Protocol):
    """A source of tools for one agent instance (see the module docstring)."""

    @property
    def name(self) -> str:
        """A label for logs and errors (the Tool resource, the MCP server, ...)."""
        ...

    async def open(self, on_change: ChangeListener) -> None:
        """Connect or load; call ``on_change(self)`` later whenever the tool list changes."""
        ...

    async def list_tools(self) -> list[RegisteredTool]:
        """The tools offered now, in a stable order."""
        ...

    async def call(self, name: str, context: ToolContext, args: JsonObject) -> JsonValue:
        """Run tool ``name``; raise (``ToolFailure`` for a chosen code) to fail the call."""
        ...

    async def aclose(self) -> None:
        """Release connections and processes (idempotent)."""
        ...


async def run_handler(tool: RegisteredTool, context: ToolContext, args: Any) -> Any:
    """Run ``tool``'s handler: ``async def`` on the loop, a plain function in a daemon thread."""
    if tool.is_async:
        return await tool.handler(context, args)
    result = await run_in_daemon_thread(tool.handler, context, args, name=tool.name)
    if inspect.isawaitable(result):
        # A plain function returning a coroutine (e.g. a lambda around an async helper).
        result = await result
    return result


async def run_in_daemon_thread(fn: Callable[..., Any], *args: Any, name: str = "handler") -> Any:
    """``fn(*args)`` in a *daemon* thread; the awaiting task gets its result or exception.

    ``asyncio.to_thread`` uses the loop's default executor, whose threads are joined when the
    loop's runner closes and again at interpreter exit: a sync handler stuck after its tool
    timed out (``time.sleep(3600)``, a hung socket) would keep the process from ever exiting.
    A daemon thread is abandoned at exit instead. Cancelling the await (the tool's deadline)
    leaves the thread running; its late result is dropped. See docs/tools.md, "Timeouts".

    The daemon threads are reused (:class:`_DaemonWorkers`): starting a thread per call cost
    more than the rest of a small tool call.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()
    context = contextvars.copy_context()

    def settle(result: Any, error: BaseException | None) -> None:
        if future.done():  # cancelled by the deadline meanwhile
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)

    def job() -> None:
        threading.current_thread().name = f"goondan-tool-{name}"
        try:
            result, error = context.run(fn, *args), None
        except BaseException as exc:  # delivered to the awaiting task, like to_thread does
            result, error = None, exc
        with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits for this any more
            loop.call_soon_threadsafe(settle, result, error)

    _workers.submit(job)
    return await future


class _DaemonWorkers:
    """Daemon threads that run one job after another, started on demand.

    A job goes to an idle worker when there is one, else to a new thread, so a stuck handler
    never delays another call: it only keeps its own thread. A worker idle for
    ``idle_seconds`` exits. ``_idle`` counts the workers waiting for a job; a worker that
    retires must take one count back first, else a job was just handed to it.
    """

    def __init__(self, idle_seconds: float = 30.0) -> None:
        self._jobs: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._idle = threading.Semaphore(0)
        self._idle_seconds = idle_seconds

    def submit(self, job: Callable[[], None]) -> None:
        if self._idle.acquire(blocking=False):
            self._jobs.put(job)
        else:
            threading.Thread(
                target=self._work, args=(job,), name="goondan-tool", daemon=True
            ).start()

    def _work(self, job: Callable[[], None]) -> None:
        if hasattr(signal, "pthread_sigmask"):
            # Ctrl-C belongs to the main thread (a prompt waiting in input() would miss it).
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        while True:
            job()
            del job  # the job holds the call's arguments and result: do not keep them while idle
            threading.current_thread().name = "goondan-tool"
            self._idle.release()
            try:
                job = self._jobs.get(timeout=self._idle_seconds)
            except queue.Empty:
                if self._idle.acquire(blocking=False):
                    return
                job = self._jobs.get()  # a submitter took our count: its job is on the way


_workers = _DaemonWorkers()


class EntryModuleProvider:
    """The exports of one ``ToolBinding``, served by its Python entry module's ``handlers``."""

    def __init__(self, binding: Any) -> None:
        self.binding = binding
        self._tools: list[RegisteredTool] | None = None

    @property
    def name(self) -> str:
        return str(attr(self.binding, "name"))

    @property
    def key(self) -> tuple[str, str | None]:
        """``(resource name, package)``: one provider per Tool resource and registry."""
        return (self.name, attr(self.binding, "package"))

    def __repr__(self) -> str:
        state = "unloaded" if self._tools is None else f"tools={len(self._tools)}"
        return f"<EntryModuleProvider {self.name!r} {state}>"

    def load(self) -> list[RegisteredTool]:
        """Execute the entry module and pair every declared export with its handler.

        Blocking (imports run module code). Raises :class:`ToolLoadError` ``E_TOOL_LOAD`` when
        the entry cannot be loaded, has no ``handlers`` mapping or lacks a declared export.
        """
        if self._tools is not None:
            return self._tools
        binding, name = self.binding, self.name
        entry = attr(binding, "entry")
        module = load_entry_module(entry, kind="tool", cache=True)
        handlers = getattr(module, "handlers", None)
        if not isinstance(handlers, Mapping):
            raise ToolLoadError(
                f"Tool {name!r}: entry {entry} does not define a `handlers` dict",
                code="E_TOOL_LOAD",
                suggestion="Define `handlers = {'<export>': handler, ...}` at module level.",
                location=str(entry),
            )
        limit = attr(binding, "error_message_limit", None) or DEFAULT_ERROR_MESSAGE_LIMIT
        timeout = attr(binding, "timeout_ms", None) or DEFAULT_TIMEOUT_MS
        tools: list[RegisteredTool] = []
        idempotent = {str(attr(e, "name")): attr(e, "idempotent", False) is True
                      for e in attr(binding, "exports", None) or ()}
        for item in binding_items(binding):
            export = item.name.split("__", 1)[1]
            handler = handlers.get(export)
            if handler is None:
                available = ", ".join(sorted(map(str, handlers))) or "none"
                raise ToolLoadError(
                    f"Tool {name!r}: no handler for export {export!r} in {entry} "
                    f"(handlers: {available})",
                    code="E_TOOL_LOAD",
                    suggestion=f"Add handlers[{export!r}] to the entry module.",
                    location=str(entry),
                )
            tools.append(build_tool(item, handler, error_message_limit=limit, timeout_ms=timeout,
                                    source=item.source, idempotent=idempotent.get(export, False)))
        self._tools = tools
        return tools

    async def open(self, on_change: ChangeListener) -> None:
        """Load the module in a worker thread (a module's tools never change)."""
        await asyncio.to_thread(self.load)

    async def list_tools(self) -> list[RegisteredTool]:
        return list(self.load())

    async def call(self, name: str, context: ToolContext, args: JsonObject) -> JsonValue:
        for tool in self.load():
            if tool.name == name:
                return await run_handler(tool, context, args)
        raise KeyError(name)

    async def aclose(self) -> None:
        """Nothing to release: tool modules are shared by the instances of a process."""
