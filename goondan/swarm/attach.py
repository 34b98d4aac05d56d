"""``goondan run`` of a swarm that already runs: attach to it instead of starting another.

:func:`claim_or_attach` decides, for one :class:`~goondan.swarm.service.SwarmService`, whether
this process runs the swarm's orchestrator or talks to the one that runs: it takes the swarm's
lock (:class:`~goondan.swarm.state.SwarmLock`) or, while another process holds it, waits until
that orchestrator answers on its control socket (it may still be starting). Three ``goondan
run`` started at once therefore leave exactly one orchestrator; the two others attach.

:class:`AttachedBackend` is the console's ``ReplBackend`` over the control socket: each line is
a ``request`` (``stream``: the Turn's runtime events arrive before the answer; Ctrl-C closes
the connection, which cancels the Turn), and the slash commands ask the entry agent's process
through ``inspect``. Leaving an attached chat does not stop the swarm. See docs/orchestrator.md
"One orchestrator per swarm".
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from goondan.conversation.messages import Message
from goondan.errors import ConfigError, GoondanError
from goondan.ipc.controlwire import send_control, stream_control
from goondan.pipeline.context import TurnResult
from goondan.swarm.frontend import EntryAgentView
from goondan.swarm.state import ActiveRuntime, read_active
from goondan.types import JsonObject, new_id

__all__ = ["AttachedBackend", "SwarmGone", "answering", "claim_or_attach"]

CLAIM_TIMEOUT_S = 60.0  # how long a second `goondan run` waits for a starting orchestrator
_POLL_S = 0.05


class SwarmGone(Exception):
    """The running swarm stopped before taking a line (``goondan run`` then starts it):
    ``lines`` are that line and the ones after it."""

    def __init__(self, lines: Iterator[str]) -> None:
        super().__init__("the running swarm stopped")
        self.lines = lines


def answering(state_root: Path, key: str) -> tuple[ActiveRuntime, JsonObject] | None:
    """The record of swarm ``key`` and its status answer, when its orchestrator runs and
    answers on its control socket with the record's token (else None)."""
    with contextlib.suppress(GoondanError):
        active = read_active(state_root, key)
        if active is None or not active.alive or not active.control_socket:
            return None
        with contextlib.suppress(OSError, ValueError):
            doc = asyncio.run(
                send_control(Path(active.control_socket), {"command": "status"}, timeout_s=5.0)
            )
            if doc.get("ok") and (not active.token or doc.get("token") == active.token):
                return active, doc
    return None


def claim_or_attach(
    service: Any, *, timeout_s: float = CLAIM_TIMEOUT_S
) -> tuple[ActiveRuntime, JsonObject] | None:
    """None once this process holds the swarm's lock (it runs the orchestrator), else the
    running orchestrator's record and status. Raises ``E_RUN_ALREADY_RUNNING`` when the lock's
    holder does not answer within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        if service.claim():
            return None
        found = answering(service.state_root, service.key)
        if found is not None:
            return found
        if time.monotonic() >= deadline:
            from goondan.swarm.service import already_running

            err = already_running(service.swarm.name, service.bundle.root, service.instance_key,
                                  service.lock.holder())
            raise ConfigError(
                err.message
                + f", but it did not answer on its control socket within {timeout_s:.0f} s",
                code=err.code,
                suggestion="see 'goondan logs' for what it is doing, or stop it "
                f"with 'goondan stop --bundle {service.bundle.root}'",
            )
        time.sleep(_POLL_S)


def _blocking(coro: Any) -> Any:
    """Run ``coro`` to the end from synchronous code, even under a running event loop."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


class AttachedBackend(EntryAgentView):
    """``ReplBackend`` over the control socket of a running swarm (see the module docstring)."""

    def __init__(
        self, active: ActiveRuntime, status: JsonObject, *, instance_key: str = "cli"
    ) -> None:
        super().__init__()
        self.active = active
        self.socket = Path(active.control_socket or "")
        self.agent_name = str(status.get("entryAgent") or "")
        self.swarm = str(status.get("swarm") or active.swarm)
        self.cli_connection = status.get("cliConnection")
        self.instance_key = instance_key

    def __repr__(self) -> str:
        return f"<AttachedBackend pid={self.active.pid} socket={self.socket}>"

    async def skip_line(self, text: str) -> None:
        """A blank line: still counted by the ``cli`` Connection's line index."""
        if self.cli_connection:
            await stream_control(self.socket, {"command": "request", "input": text, "cli": True,
                                               "instanceKey": self.instance_key}, timeout_s=None)

    async def run_turn(self, text: str) -> TurnResult:
        """One line to the entry agent (or where the ``cli`` Connection routes it)."""
        request: JsonObject = {
            "command": "request",
            "input": text,
            "instanceKey": self.instance_key,
            "cli": True,
            "stream": bool(self._listeners),
        }
        answer = await stream_control(self.socket, request, timeout_s=None, on_event=self._dispatch)
        self.turns += 1
        if not answer.get("ok"):
            error = (
                answer.get("error")
                if isinstance(answer.get("error"), dict)
                else {
                    "code": answer.get("code") or "E_RUN_CONTROL",
                    "message": answer.get("message") or "",
                }
            )
            return TurnResult(turn_id=new_id("turn"), finish_reason="error", error=error)
        response = answer.get("response")
        finish: Literal["text_response", "max_steps"] = (
            "max_steps" if answer.get("finishReason") == "max_steps" else "text_response")
        dropped = answer.get("eventsDropped")  # the stream was cut: the console prints it all
        return TurnResult(turn_id=str(answer.get("turnId") or new_id("turn")), finish_reason=finish,
                          response_message=Message.assistant(str(response)) if response else None,
                          metadata={"eventsDropped": dropped} if dropped else {})

    def _dispatch(self, payload: JsonObject) -> None:
        for listener in tuple(self._listeners):
            listener(payload)

    def _query(self, what: str) -> JsonObject | None:
        answer = _blocking(
            send_control(
                self.socket,
                {
                    "command": "inspect",
                    "agent": self.agent_name,
                    "instanceKey": self.instance_key,
                    "what": what,
                },
            )
        )
        result = answer.get("result") if answer.get("ok") else None
        return result if isinstance(result, dict) else None

    def messages(self) -> list[Message]:
        state = self._state()
        return [Message.from_dict(m) for m in (state or {}).get("messages") or []]

    def describe(self) -> dict[str, str]:
        out = {"agent": self.agent_name, "instance": self.instance_key, "swarm": self.swarm,
               "orchestrator": f"{self.active.instance_key} (pid {self.active.pid}, attached)",
               "logs": str(self.active.log_dir or "")}
        state = self._state()
        if state is not None:
            out.update({k: str(v) for k, v in (state.get("describe") or {}).items()})
        return out

    def cost(self) -> float | None:
        return None  # the orchestrator's ledger: `goondan status`

    async def clear(self) -> None:
        await send_control(
            self.socket, {"command": "restart", "agent": self.agent_name, "fresh": True}
        )

    async def fold(self) -> int:
        answer = await send_control(self.socket, {"command": "inspect", "agent": self.agent_name,
                                                  "instanceKey": self.instance_key, "what": "fold"})
        result = answer.get("result") if answer.get("ok") else None
        return int(result.get("messages") or 0) if isinstance(result, dict) else 0
