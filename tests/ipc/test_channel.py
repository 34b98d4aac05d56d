"""Transports: ordered JSON frames over a multiprocessing pipe and in process."""

from __future__ import annotations

import asyncio
import multiprocessing

from goondan.ipc.channel import InProcessTransport, PipeTransport, Transport
from goondan.ipc.protocol import IpcMessage
from goondan.types import AgentEvent


def _msg(n: int, size: int = 0) -> IpcMessage:
    return IpcMessage.event("a", "b", AgentEvent(type="t", input=str(n) + "x" * size))


async def _exchange(a: Transport, b: Transport, count: int, size: int) -> None:
    async def pump(src: Transport, dst: Transport) -> list[str]:
        for n in range(count):
            await src.send(_msg(n, size))
        got = []
        for _ in range(count):
            message = await dst.recv()
            assert message is not None
            got.append((message.agent_event().input or "").rstrip("x"))
        return got

    async with asyncio.timeout(20):
        # both directions at once with frames bigger than the pipe buffer: must not deadlock
        left, right = await asyncio.gather(pump(a, b), pump(b, a))
    assert left == right == [str(n) for n in range(count)]


def test_pipe_transport_orders_frames_both_ways_without_deadlock() -> None:
    async def main() -> None:
        one, two = multiprocessing.get_context("spawn").Pipe(duplex=True)
        a, b = PipeTransport(one), PipeTransport(two)
        await _exchange(a, b, 200, 10)
        await _exchange(a, b, 20, 300_000)
        await a.send(_msg(99))
        await a.aclose()
        last = await b.recv()
        assert last is not None and last.agent_event().input == "99"
        assert await b.recv() is None  # EOF after the frames sent before close
        assert await b.recv() is None
        assert b.closed
        await b.aclose()

    asyncio.run(main())


def test_in_process_transport_pair() -> None:
    async def main() -> None:
        a, b = InProcessTransport.pair()
        await _exchange(a, b, 100, 10)
        await a.send(_msg(1))
        await a.aclose()
        assert (await b.recv()) is not None
        assert await b.recv() is None

    asyncio.run(main())
