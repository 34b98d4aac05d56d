"""Workspace storage: state root, workspace ids, instance directories, durable conversations."""

from __future__ import annotations

from goondan.workspace.catalog import (
    InstanceInfo,
    delete_instance,
    find_instances,
    iter_instances,
    read_pending_events,
    read_tail_messages,
)
from goondan.workspace.paths import (
    InstancePaths,
    StateLayout,
    instance_dir_name,
    resolve_state_root,
    workspace_id_for,
)
from goondan.workspace.plans import plan_commit, plan_recovery
from goondan.workspace.store import ConversationStore, InstanceStore

__all__ = [
    "ConversationStore",
    "InstanceInfo",
    "InstancePaths",
    "InstanceStore",
    "StateLayout",
    "delete_instance",
    "find_instances",
    "instance_dir_name",
    "iter_instances",
    "plan_commit",
    "plan_recovery",
    "read_pending_events",
    "read_tail_messages",
    "resolve_state_root",
    "workspace_id_for",
]
