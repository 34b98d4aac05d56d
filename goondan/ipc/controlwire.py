"""The control socket's wire format and its client (``goondan send``/``status``/``stop``/…).

One request per connection: the client writes one JSON object on one line, the orchestrator
answers with one JSON object on one line. A request with ``"stream": true`` (the chat of a
``goondan run`` attached to a running swarm) is first answered with ``{"event": payload}``
lines — the Turn's streamed runtime events, in order — and then the answer; closing the
connection before the answer cancels that Turn.

A request with ``"ack": true`` is first answered with ``{"accepted": {"id", "agent",
"instanceKey"}}`` once the message is stored in the Swarm's durable inbox: from then on it runs
exactly once even if the orchestrator is killed (docs/orchestrator.md "Durable inputs").

A line may be up to :data:`MAX_CONTROL_BYTES` (16 MiB) long, on both sides: ``asyncio``'s
default of 64 KiB made any longer message fail with a stream error. The client refuses a larger
request before sending it, and either side reports a larger line as
``E_RUN_MESSAGE_TOO_LARGE`` (docs/orchestrator.md "Control socket").
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from pathlib import Path

from goondan.errors import IpcError, UsageError
from goondan.types import JsonObject

__all__ = [
    "MAX_CONTROL_BYTES",
    "ControlUnreachable",
    "encode_line",
    "message_too_large",
    "send_control",
    "stream_control",
]

MAX_CONTROL_BYTES = 16 * 1024 * 1024  # one control line (request or answer), JSON included


def message_too_large(size: int | None = None) -> UsageError:
    """The error of a control line above :data:`MAX_CONTROL_BYTES` (``size`` in bytes, if known)."""
    what = f" ({size} bytes)" if size is not None else ""
    return UsageError(
        f"the message{what} is larger than the control socket's limit of {MAX_CONTROL_BYTES} bytes "
        f"({MAX_CONTROL_BYTES // (1024 * 1024)} MiB, JSON-encoded)",
        code="E_RUN_MESSAGE_TOO_LARGE",
        suggestion="send a shorter message, or put the text in a file in the agent's workdir and "
        "send its path",
    )


def encode_line(document: JsonObject) -> bytes:
    """``document`` as one control line (compact JSON: no newline inside)."""
    return json.dumps(document, separators=(",", ":")).encode() + b"\n"


class ControlUnreachable(IpcError):
    """Nothing listens on the control socket, or it closed the connection before answering a
    word (a connection left in the backlog of a closing socket): the request was not taken,
    unless the orchestrator crashed while taking it."""


def _unreachable(socket_path: Path, exc: OSError) -> IpcError:
    # A socket that cannot be reached is a communication failure (IpcError, exit 1), not a
    # configuration problem.
    return ControlUnreachable(
        f"cannot reach the running orchestrator at {socket_path}: {exc.strerror or exc}",
        code="E_IPC_CONTROL", suggestion="check that the swarm runs ('goondan instance list'), "
        "or start it with 'goondan run'",
    )


def _no_answer(socket_path: Path, why: str) -> IpcError:
    return IpcError(
        f"the orchestrator at {socket_path} did not answer: {why}",
        code="E_IPC_CONTROL",
        suggestion="see 'goondan logs' for what the orchestrator is doing",
    )


async def stream_control(
    socket_path: Path, request: JsonObject, *, timeout_s: float | None = 120.0,
    on_event: Callable[[JsonObject], None] | None = None,
    on_accepted: Callable[[JsonObject], bool] | None = None,
) -> JsonObject:
    """Send one control request and return its answer; ``{"event": …}`` lines before it go to
    ``on_event``, an ``{"accepted": …}`` line (a request with ``"ack": true``) to ``on_accepted``,
    whose True return ends the call with that line as the answer. Cancelling this coroutine
    closes the connection (a streamed Turn is cancelled)."""
    line = encode_line(request)
    if len(line) > MAX_CONTROL_BYTES:
        raise message_too_large(len(line))
    try:
        reader, writer = await asyncio.open_unix_connection(
            str(socket_path), limit=MAX_CONTROL_BYTES
        )
    except OSError as exc:
        raise _unreachable(socket_path, exc) from exc
    received = False
    try:
        writer.write(line)
        await writer.drain()
        async with asyncio.timeout(timeout_s):
            while True:
                try:
                    data = await reader.readline()
                except (asyncio.LimitOverrunError, ValueError) as exc:
                    # a line above the limit: StreamReader.readline turns asyncio's
                    # LimitOverrunError into a plain ValueError (CPython 3.11 asyncio/streams.py)
                    raise message_too_large() from exc
                if not data and not received:
                    # closed before a word: a connection still in the backlog of a socket that
                    # was closed (the orchestrator stopping), or a crash
                    raise ControlUnreachable(
                        "the orchestrator closed the control connection without answering",
                        code="E_IPC_CONTROL",
                        suggestion="see 'goondan logs' for what the orchestrator is doing",
                    )
                if not data:
                    raise IpcError(
                        "the orchestrator closed the control connection",
                        code="E_IPC_CONTROL",
                        suggestion="see 'goondan logs' for what the orchestrator is doing",
                    )
                received = True
                try:
                    document = json.loads(data)
                except ValueError as exc:  # not JSON, or not UTF-8
                    raise _no_answer(socket_path, f"undecodable answer ({exc})") from exc
                if not isinstance(document, dict):
                    raise _no_answer(socket_path, "not a JSON object")
                if "accepted" in document and "ok" not in document:
                    if on_accepted is not None and on_accepted(document):
                        return document
                    continue
                if "event" in document and "ok" not in document:
                    if on_event is not None and isinstance(document["event"], dict):
                        on_event(document["event"])
                    continue
                return document
    except TimeoutError as exc:
        raise _no_answer(socket_path, "timed out") from exc
    except (ConnectionResetError, BrokenPipeError) as exc:
        if not received:
            raise _unreachable(socket_path, exc) from exc
        raise _no_answer(socket_path, exc.strerror or str(exc)) from exc
    except OSError as exc:
        raise _no_answer(socket_path, exc.strerror or str(exc)) from exc
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


async def send_control(
    socket_path: Path, request: JsonObject, *, timeout_s: float = 120.0
) -> JsonObject:
    """Send one control request to a running orchestrator and return its answer."""
    return await stream_control(socket_path, request, timeout_s=timeout_s)
