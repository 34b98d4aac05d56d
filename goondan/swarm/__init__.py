"""Running a swarm: the orchestrator, instance queue, supervision, spawners, agent processes,
the service/daemon, attach and watch.

The wire these pieces talk over (framing, typed messages, channels, request matching) is
:mod:`goondan.ipc`. See ``docs/orchestrator.md``. Submodules are imported on use (``goondan
--help`` stays fast).
"""

from __future__ import annotations

__all__: list[str] = []
