"""``ToolContext``: what a tool handler receives besides its input (docs/tools.md "ToolContext").

Handlers are called ``handler(ctx, input)``. ``workdir`` is the instance's working directory
(bundle root by default, ``Agent.spec.workdir`` or the spawn ``cwd`` otherwise); file and shell
tools resolve relative paths against it. ``message`` is the assistant message that holds the
call. ``runtime`` is the optional agent-to-agent API (``request``/``send``/``spawn``/``list``/
``catalog``), ``None`` when the runtime provides none. ``config`` is the Tool's ``spec.config``
merged with the Agent reference's ``config``; ``max_output_bytes`` is the cap the executor applies
to the result (a tool that produces a lot should stop reading there, docs/tools.md).
``idempotency_key`` is stable for this call across crashes and resumes (``gdn_`` + 40 hex; send it
as an ``Idempotency-Key`` header, docs/tools.md "Idempotency"). The v1 interfaces ``swarmBundle``
and ``oauth`` deliberately do not exist.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from goondan.conversation.messages import Message
from goondan.tools.output import DEFAULT_MAX_OUTPUT_BYTES

__all__ = ["CURRENT_TURN", "ToolContext"]

# The turn whose step catalog is being built (set by ``ToolRegistry.step_catalog`` while it
# lists the providers; ``None`` otherwise). A provider keys per-turn decisions by it: an MCP
# server that failed to start is not started again in the same turn (docs/mcp.md "Lifecycle").
CURRENT_TURN: ContextVar[str | None] = ContextVar("goondan_current_turn", default=None)


@dataclass(frozen=True)
class ToolContext:
    """Read-only execution context of one tool call."""

    agent_name: str
    instance_key: str
    turn_id: str
    trace_id: str
    tool_call_id: str
    message: Message | None
    workdir: Path
    logger: logging.Logger = field(default_factory=lambda: logging.getLogger("goondan.tools"))
    runtime: Any = None
    config: Mapping[str, Any] = field(default_factory=dict)
    max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES
    idempotency_key: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.workdir, Path):
            object.__setattr__(self, "workdir", Path(self.workdir))

    def __repr__(self) -> str:
        return (
            f"ToolContext(agent_name={self.agent_name!r}, instance_key={self.instance_key!r}, "
            f"turn_id={self.turn_id!r}, tool_call_id={self.tool_call_id!r}, "
            f"workdir={str(self.workdir)!r})"
        )

    def resolve_path(self, path: str | Path) -> Path:
        """``path`` if absolute, else relative to :attr:`workdir`."""
        candidate = Path(path).expanduser()
        return candidate if candidate.is_absolute() else self.workdir / candidate
