"""The e2e tests of ``goondan run`` leave no process behind (issue 27 item 5).

``no_leftover_processes`` (tests/support/process_tree.py) is applied to every test of the
modules in :data:`RUN_MODULES` — each starts ``goondan run`` (``tests/e2e/test_run*.py`` and the
ones using ``tests/support/connector_e2e.start_run``): after the test stopped its swarm, no
process started during the test may stay alive, by parent chain or process group.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.process_tree import ProcessWatch, watch_run_module

RUN_MODULES = (
    "test_run",
    "test_base_connectors_run",
    "test_connector_delivery",
    "test_agents_tools_run",
    "test_connectors_run",
    "test_budget_run",
    "test_self_restart",
    "test_connector_sync_run",
    "test_delegation_http",
    "test_instance_live",
    "test_otlp_phoenix",
    "test_service_mode",
    "test_webhook_event_from_body",
    "test_durable_inputs",
    "test_steering_run",
    "test_approvals_run",
    "test_resume_run",
    "test_studio_run",
)


@pytest.fixture(autouse=True)
def no_leftover_processes(request: pytest.FixtureRequest) -> Iterator[ProcessWatch | None]:
    yield from watch_run_module(request, RUN_MODULES)
