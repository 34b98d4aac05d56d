"""Workspace storage: state root, workspace ids, instance directories, durable conversations.

The names below are imported on first use, so ``goondan.workspace.paths`` alone does not load
the store and the catalog (docs/runtime.md "Performance").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from goondan.lazy import lazy_exports

if TYPE_CHECKING:
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

_HOME = {
    "InstanceInfo": "catalog", "delete_instance": "catalog", "find_instances": "catalog",
    "iter_instances": "catalog", "read_pending_events": "catalog", "read_tail_messages": "catalog",
    "InstancePaths": "paths", "StateLayout": "paths", "instance_dir_name": "paths",
    "resolve_state_root": "paths", "workspace_id_for": "paths", "plan_commit": "plans",
    "plan_recovery": "plans", "ConversationStore": "store", "InstanceStore": "store",
}


__getattr__ = lazy_exports(__name__, _HOME)
