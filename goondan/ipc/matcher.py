"""One request matcher: correlation id → who waits for the answer.

Every request/answer pairing in the IPC layer goes through :class:`RequestMatcher`
(docs/orchestrator.md "Requests"):

* the orchestrator matches a callee's answer (``metadata.inReplyTo``) to the process that asked,
  or to the local future of :meth:`Orchestrator.request` (``route`` says which);
* an agent process (:class:`~goondan.swarm.agent_process.IpcAgentRouter`) matches the answers to
  its own requests and queries to the futures its tools wait on.

An entry is either *awaited* (it has a future: :meth:`expect`) or *tracked* (only a route:
:meth:`track`); :meth:`take` removes and returns it, :meth:`resolve` hands an answer to its
future. :meth:`close` fails every future and refuses new ones (the channel is gone).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Generic, TypeVar

__all__ = ["Pending", "RequestMatcher", "new_correlation_id"]

A = TypeVar("A")  # the answer
R = TypeVar("R")  # where it goes / what the waiter needs to know


def new_correlation_id() -> str:
    """A fresh ``corr_<hex>`` correlation id."""
    return f"corr_{uuid.uuid4().hex}"


@dataclass
class Pending(Generic[A, R]):
    """One open request: its ``route`` and, when someone awaits it here, a future."""

    correlation_id: str
    route: R
    future: asyncio.Future[A] | None = None


class RequestMatcher(Generic[A, R]):
    """Correlation id → :class:`Pending` (see the module docstring)."""

    def __init__(self) -> None:
        self._open: dict[str, Pending[A, R]] = {}
        self._closed: BaseException | None = None

    def __repr__(self) -> str:
        return f"<RequestMatcher open={len(self._open)} closed={self._closed is not None}>"

    def __len__(self) -> int:
        return len(self._open)

    def __contains__(self, correlation_id: object) -> bool:
        return correlation_id in self._open

    def __iter__(self) -> Iterator[Pending[A, R]]:
        return iter(list(self._open.values()))

    def expect(self, correlation_id: str, route: R) -> asyncio.Future[A]:
        """Open an awaited entry; raises the close error once :meth:`close` was called."""
        if self._closed is not None:
            raise self._closed
        future: asyncio.Future[A] = asyncio.get_running_loop().create_future()
        self._open[correlation_id] = Pending(correlation_id, route, future)
        return future

    def track(self, correlation_id: str, route: R) -> None:
        """Open an entry nobody awaits here (the answer is forwarded along ``route``)."""
        self._open[correlation_id] = Pending(correlation_id, route)

    def get(self, correlation_id: str) -> Pending[A, R] | None:
        """The open entry, left open."""
        return self._open.get(correlation_id)

    def take(self, correlation_id: str) -> Pending[A, R] | None:
        """Remove and return the entry (None: unknown or already answered)."""
        return self._open.pop(correlation_id, None)

    def forget(self, correlation_id: str) -> None:
        """Remove the entry if it is open (the waiter gave up)."""
        self._open.pop(correlation_id, None)

    def resolve(self, correlation_id: str, answer: A) -> bool:
        """Hand ``answer`` to the awaited entry; False if nobody awaits it (a late answer).
        The entry stays until its waiter forgets it, so a second answer is dropped too."""
        pending = self._open.get(correlation_id)
        if pending is None or pending.future is None or pending.future.done():
            return False
        pending.future.set_result(answer)
        return True

    def close(self, error: BaseException, *, refuse_new: bool = True) -> None:
        """Fail every awaited entry with ``error`` and drop all entries; later :meth:`expect`
        calls raise ``error`` unless ``refuse_new`` is False."""
        if refuse_new:
            self._closed = error
        for pending in self._open.values():
            if pending.future is not None and not pending.future.done():
                pending.future.set_exception(error)
        self._open.clear()
