"""``McpToolProvider``: an MCP server's tools for one agent instance (docs/mcp.md "Lifecycle").

One provider = one (agent instance, server) pair, added to the instance's
:class:`~goondan.tools.registry.ToolRegistry` lazily: the server starts when the first step
builds its catalog, and the session is reused across turns until the instance closes.

* Tools are listed once per session and again after ``notifications/tools/list_changed`` (the
  provider calls the registry's ``on_change``; the next step's catalog lists them again).
* Catalog names are ``<resource>__<export>`` (:func:`~goondan.mcp.protocol.tool_names`);
  ``exports`` in the Tool resource keeps only the named server tools.
* When the server dies, the call that saw it fails with ``E_MCP_CLOSED``; the next call or
  catalog starts a new session. A server that fails to start is unavailable for the rest of
  that turn (:data:`~goondan.tools.context.CURRENT_TURN`: a hung server costs one
  ``startTimeoutMs`` per turn, not one per step) and is retried in a later turn with
  exponential backoff (0.5 s doubling to 30 s); meanwhile its tools are absent from the catalog
  and a call fails with ``E_MCP_UNAVAILABLE``. The failure is logged at WARNING with the last
  lines the server wrote on stderr.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from goondan.config.mcp import McpServerSpec
from goondan.errors import McpError
from goondan.mcp.client import McpSession
from goondan.mcp.protocol import ToolErrorResult, result_output, tool_names
from goondan.mcp.transports import HttpTransport, StdioTransport, Transport
from goondan.tools.context import CURRENT_TURN, ToolContext
from goondan.tools.executor import ToolFailure
from goondan.tools.providers import ChangeListener
from goondan.tools.registry import RegisteredTool, build_tool
from goondan.types import JsonObject, JsonValue, ToolCatalogItem, ToolSource

__all__ = ["McpToolProvider", "backoff_s"]

_BACKOFF_BASE_S = 0.5
_BACKOFF_MAX_S = 30.0
# The executor's own deadline sits past the request timeout so E_MCP_TIMEOUT (which also
# cancels the request on the server) is what the model sees.
_DEADLINE_MARGIN_MS = 2_000


def backoff_s(failures: int) -> float:
    """Seconds to wait before start attempt number ``failures + 1`` (0 for the first)."""
    if failures <= 0:
        return 0.0
    return float(min(_BACKOFF_MAX_S, _BACKOFF_BASE_S * 2 ** (failures - 1)))


class McpToolProvider:
    """A :class:`~goondan.tools.providers.ToolProvider` backed by one MCP server."""

    def __init__(self, spec: McpServerSpec, *, env: Mapping[str, str] | None = None,
                 logger: logging.Logger | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.spec = spec
        self._clock = clock
        self._env = dict(env) if env is not None else None
        self._log = logger or logging.getLogger("goondan.mcp")
        self._session: McpSession | None = None
        self._lock = asyncio.Lock()
        self._on_change: ChangeListener | None = None
        self._tools: list[RegisteredTool] | None = None
        self._names: dict[str, str] = {}
        self.state = "idle"          # idle | starting | ready | failed | closed
        self.last_error: str | None = None
        self.failures = 0
        self.sessions_started = 0
        self._retry_at = 0.0
        self._failed_turn: str | None = None   # the turn whose start attempt failed
        self._closing: set[asyncio.Future[None]] = set()

    def __repr__(self) -> str:
        return f"<McpToolProvider {self.spec.name} {self.state}>"

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def lazy(self) -> bool:
        """Start on the first catalog, not when the instance opens."""
        return True

    async def open(self, on_change: ChangeListener) -> None:
        """Remember ``on_change``; the server starts at the first :meth:`list_tools`."""
        self._on_change = on_change

    # --- session --------------------------------------------------------------------------

    def _transport(self) -> Transport:
        import os

        env = self._env if self._env is not None else dict(os.environ)
        timeout_s = self.spec.timeout_ms / 1000.0
        if self.spec.command:
            values, unset = self.spec.resolve_env(env)
            self._check_unset(unset, "env")
            return StdioTransport(self.spec.command, env=values,
                                  cwd=self.spec.cwd or self.spec.root, logger=self._log,
                                  label=self.spec.name)
        headers, unset = self.spec.resolve_headers(env)
        self._check_unset(unset, "headers")
        assert self.spec.url is not None
        return HttpTransport(self.spec.url, headers=headers, timeout_s=timeout_s,
                             logger=self._log, label=self.spec.name)

    def _check_unset(self, unset: list[str], section: str) -> None:
        if unset:
            raise McpError(f"MCP server {self.spec.name!r}: {section} {', '.join(unset)} "
                           "resolve to no value",
                           code="E_MCP_START",
                           suggestion="Set the environment variables they name (goondan "
                                      "validate lists them).")

    async def session(self, *, turn_id: str | None = None) -> McpSession:
        """The live session, started (or restarted) when needed.

        ``turn_id`` (default :data:`~goondan.tools.context.CURRENT_TURN`) is the turn asking.
        Raises ``McpError``: ``E_MCP_UNAVAILABLE`` after a failed start in the same turn or while
        backing off, or the start's own error.
        """
        session = self._session
        if session is not None and session.alive:
            return session
        async with self._lock:
            session = self._session
            if session is not None and session.alive:
                return session
            if self.state == "closed":
                raise McpError(f"MCP server {self.spec.name!r} is closed", code="E_MCP_CLOSED")
            if session is not None:  # died: release the old process before a new one
                self._session = None
                await session.close()
            turn = turn_id or CURRENT_TURN.get()
            if self._failed_in(turn):
                raise McpError(
                    f"MCP server {self.spec.name!r} failed to start in this turn; it is tried "
                    f"again in a later turn: {self.last_error}",
                    code="E_MCP_UNAVAILABLE",
                    suggestion="See the agent log for the server's output.")
            wait = self._retry_at - self._clock()
            if wait > 0:
                raise McpError(
                    f"MCP server {self.spec.name!r} is unavailable (retry in {wait:.1f} s): "
                    f"{self.last_error}",
                    code="E_MCP_UNAVAILABLE",
                    suggestion="See the agent log for the server's output.")
            return await self._start(turn)

    async def _start(self, turn: str | None) -> McpSession:
        self.state = "starting"
        session: McpSession | None = None
        started = time.monotonic()
        try:
            session = McpSession(self._transport(), label=self.spec.name,
                                 timeout_s=self.spec.timeout_ms / 1000.0,
                                 on_tools_changed=self._tools_changed, logger=self._log)
            await session.start(timeout_s=self.spec.start_timeout_s)
        except BaseException as exc:
            elapsed_ms = (time.monotonic() - started) * 1000
            stderr: str | None = None
            if session is not None:
                try:
                    if isinstance(exc, Exception):
                        gone = isinstance(exc, McpError) and exc.code == "E_MCP_CLOSED"
                        stderr = await _stderr_tail(session.transport, exited=gone)
                finally:
                    self._close_later(session)
            # The server's own last words ("No module named mcp_server_time") go into the error
            # itself, so every surface shows them at the default verbosity (validate, doctor,
            # the tool error the model and the REPL see), not only the agent log.
            said = _last_words(stderr)
            if isinstance(exc, McpError):
                if said:
                    failed = McpError(f"{exc.message}; the server said: {said}", code=exc.code,
                                      suggestion=exc.suggestion, location=exc.location)
                    self._failed(failed.message, turn, elapsed_ms=elapsed_ms, stderr=stderr)
                    raise failed from exc
                self._failed(exc.message, turn, elapsed_ms=elapsed_ms, stderr=stderr)
            elif isinstance(exc, Exception):
                reason = f"{type(exc).__name__}: {exc}" + (
                    f"; the server said: {said}" if said else ""
                )
                self._failed(reason, turn, elapsed_ms=elapsed_ms, stderr=stderr)
                raise McpError(f"MCP server {self.spec.name!r} failed to start: {exc}"
                               + (f"; the server said: {said}" if said else ""),
                               code="E_MCP_START") from exc
            else:
                self.state = "idle"
            raise
        self._session = session
        self.state = "ready"
        self.failures = 0
        self._retry_at = 0.0
        self._failed_turn = None
        self.sessions_started += 1
        self._tools = None
        self._log.info("MCP server %s ready (%s, protocol %s)", self.spec.name,
                       self.spec.transport, session.protocol_version)
        return session

    def _failed_in(self, turn: str | None) -> bool:
        """The last start failed during ``turn``: the rest of that turn does not wait for it."""
        return self.state == "failed" and turn is not None and turn == self._failed_turn

    def _close_later(self, session: McpSession) -> None:
        """Close a session that failed to start without making the step wait for it.

        A hung stdio server that ignores the end of its stdin takes the close grace period
        (then SIGTERM); :meth:`aclose` waits for these closes, so none outlives the instance.
        """
        task = asyncio.ensure_future(session.close())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    def _failed(self, reason: str, turn: str | None, *, elapsed_ms: float | None = None,
                stderr: str | None = None) -> None:
        self.state = "failed"
        self.last_error = reason
        self.failures += 1
        self._failed_turn = turn
        self._retry_at = self._clock() + backoff_s(self.failures)
        if self._on_change is not None:
            # The next step's catalog lists the tools again: absent while the server is down
            # (a failed restart in a call would otherwise leave them offered all turn).
            self._on_change(self)
        if elapsed_ms is None:
            self._log.warning("MCP server %s: %s", self.spec.name, reason)
            return
        # The server's own words are the likely cause; at INFO (the default hides it) they
        # would be lost, so the tail goes with the warning.
        tail = "".join(f"\n  | {line}" for line in (stderr or "").splitlines())
        retry = "" if self._failed_turn is None else "not again in this turn, "
        self._log.warning(
            "%s (start failed after %.0f ms; %snext attempt in %.1f s or later)%s", reason,
            elapsed_ms, retry, backoff_s(self.failures),
            f"\n  the server's stderr ended with:{tail}" if tail
            else "" if stderr is None else "\n  the server wrote nothing on stderr")

    def _tools_changed(self) -> None:
        self._tools = None
        if self._on_change is not None:
            self._on_change(self)

    # --- ToolProvider ---------------------------------------------------------------------

    async def list_tools(self) -> list[RegisteredTool]:
        """The server's tools (starting it if needed); ``[]`` while it is unavailable."""
        if self._tools is not None and self._session is not None and self._session.alive:
            return list(self._tools)
        turn = CURRENT_TURN.get()
        if self._failed_in(turn):
            # Failed to start or to list its tools earlier in this turn: the remaining steps
            # do not wait for it again (a later turn tries).
            if self._on_change is not None:
                self._on_change(self)
            return []
        try:
            session = await self.session()
            listed = await session.list_tools()
        except McpError as exc:
            if exc.code != "E_MCP_UNAVAILABLE" and self.state != "failed":
                self._failed(exc.message, turn)
            # Stay stale: the next step's catalog tries again (after the backoff).
            if self._on_change is not None and self.state != "closed":
                self._on_change(self)
            return []
        self._tools = self._build(listed)
        return list(self._tools)

    def _build(self, listed: list[JsonObject]) -> list[RegisteredTool]:
        allowed = self.spec.exports
        if allowed is not None:
            missing = sorted(set(allowed) - {str(t["name"]) for t in listed})
            if missing:
                self._log.warning("MCP server %s has no tool named %s (exports)",
                                  self.spec.name, ", ".join(missing))
            listed = [t for t in listed if t["name"] in allowed]
        by_name = {str(t["name"]): t for t in listed}
        self._names = tool_names(self.spec.name, list(by_name))
        tools: list[RegisteredTool] = []
        for catalog_name, server_name in self._names.items():
            raw = by_name[server_name]
            schema = raw.get("inputSchema")
            parameters = dict(schema) if isinstance(schema, dict) else {}
            parameters.setdefault("type", "object")
            parameters.setdefault("properties", {})
            item = ToolCatalogItem(
                catalog_name, str(raw.get("description") or raw.get("title") or ""), parameters,
                ToolSource("mcp", self.spec.name, {"server": self.spec.name, "tool": server_name}))
            tools.append(build_tool(item, self._handler(catalog_name),
                                    timeout_ms=self.spec.timeout_ms + _DEADLINE_MARGIN_MS,
                                    source=item.source))
        return tools

    def _handler(self, catalog_name: str) -> Any:
        async def handler(context: ToolContext, args: JsonObject) -> JsonValue:
            return await self.call(catalog_name, context, args)
        return handler

    async def call(self, name: str, context: ToolContext, args: JsonObject) -> JsonValue:
        """Run ``tools/call``; failures become ``ToolFailure`` with an ``E_MCP_…`` code."""
        server_name = self._names.get(name)
        if server_name is None:
            raise ToolFailure(f"MCP server {self.spec.name!r} offers no tool {name!r}",
                              code="E_MCP_NO_TOOL")
        try:
            # A restart that fails here is not tried again by the rest of this turn either.
            session = await self.session(turn_id=context.turn_id or None)
            result = await session.call_tool(server_name, args)
            return result_output(result)
        except ToolErrorResult as exc:
            raise ToolFailure(exc.message, code="E_MCP_TOOL_ERROR",
                              suggestion="The server reported this error; check the arguments.") \
                from None
        except McpError as exc:
            if exc.code == "E_MCP_CLOSED" and self.state != "closed":
                self.state = "failed"
                self.last_error = exc.message
            raise ToolFailure(exc.message, code=exc.code, suggestion=exc.suggestion) from None

    async def aclose(self) -> None:
        """Close the session (stopping a stdio server); idempotent."""
        async with self._lock:
            self.state = "closed"
            session, self._session = self._session, None
            if session is not None:
                await session.close()
            if self._closing:  # failed starts still being closed
                await asyncio.gather(*list(self._closing), return_exceptions=True)

    def status(self) -> JsonObject:
        """State for ``/tools`` and ``goondan doctor``."""
        state = self.state
        if state == "ready" and self._session is not None and not self._session.alive:
            state = "exited"  # noticed by the reader; the next call or step restarts it
        out: JsonObject = {
            "name": self.spec.name, "transport": self.spec.transport, "target": self.spec.target,
            "state": state, "tools": len(self._tools or []),
            "sessionsStarted": self.sessions_started,
        }
        if self._session is not None:
            out.update(self._session.transport.status())
            out["protocolVersion"] = self._session.protocol_version
        if self.last_error:
            out["lastError"] = self.last_error
        if state == "failed":
            out["retryInMs"] = max(0, round((self._retry_at - self._clock()) * 1000))
        return out


def _last_words(stderr: str | None, limit: int = 300) -> str | None:
    """The last non-blank stderr line (a traceback's last line names the error), cut to
    ``limit`` characters; None when the server wrote nothing."""
    lines = [line.strip().lstrip("|").strip() for line in (stderr or "").splitlines()]
    last = next((line for line in reversed(lines) if line), None)
    return last[:limit] if last else None


async def _stderr_tail(transport: Transport, *, exited: bool) -> str | None:
    """What a stdio server last wrote on stderr (masked); ``None`` when no process ran."""
    if isinstance(transport, StdioTransport):
        return await transport.stderr_tail(exited=exited)
    return None
