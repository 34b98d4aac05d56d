"""The wire between the orchestrator and its workers: JSON message framing, typed messages,
channels (transports) and request matching.

Running a swarm over this wire is :mod:`goondan.swarm`. See ``docs/orchestrator.md``.
Submodules are imported on use (``goondan --help`` stays fast).
"""

from __future__ import annotations

__all__: list[str] = []
