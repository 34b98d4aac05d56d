"""ToolContext (seed 002 §2.5, §7.3; Decision 16)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from goondan.tools.context import ToolContext
from tests.support.pipeline_harness import tool_context


def test_fields_of_seed_002() -> None:
    """seed 002 §7.3: agentName, instanceKey, turnId, toolCallId, message, workdir, logger
    (+traceId, runtime, and the Tool's config, output cap and idempotency key, docs/tools.md)."""
    names = {f.name for f in dataclasses.fields(ToolContext)}
    assert names == {"agent_name", "instance_key", "turn_id", "trace_id", "tool_call_id",
                     "message", "workdir", "logger", "runtime", "config", "max_output_bytes",
                     "idempotency_key"}


def test_no_v1_interfaces() -> None:
    """seed 002 §2.5 rule 3: ToolContext MUST NOT include swarmBundle, oauth or other v1 fields."""
    ctx = tool_context()
    for removed in ("swarm_bundle", "swarmBundle", "oauth", "instance", "swarm", "agent"):
        assert not hasattr(ctx, removed)


def test_workdir_is_a_path_and_context_is_read_only(tmp_path: Path) -> None:
    """seed 002 §2.5 rule 1 / Decision 16: workdir is the instance working directory; fields are
    readonly."""
    ctx = tool_context(workdir=str(tmp_path))
    assert ctx.workdir == tmp_path and isinstance(ctx.workdir, Path)
    assert ctx.runtime is None and ctx.logger.name == "goondan.tools"
    with pytest.raises(dataclasses.FrozenInstanceError):
        ctx.agent_name = "other"  # type: ignore[misc]
    assert "workdir" in repr(ctx)
