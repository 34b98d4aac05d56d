"""Process-per-agent runtime: JSON IPC messages, transports, spawners, the orchestrator.

See ``docs/orchestrator.md``. Submodules are imported on use (``goondan --help`` stays fast).
"""

from __future__ import annotations

__all__: list[str] = []
