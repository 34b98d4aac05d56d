"""The e2e tests of ``goondan run`` leave no process behind (issue 27 item 5), and run in both
isolation modes (issue 33).

``no_leftover_processes`` (tests/support/process_tree.py) is applied to every test of the
modules in :data:`RUN_MODULES` — each starts ``goondan run`` (``tests/e2e/test_run*.py`` and the
ones using ``tests/support/connector_e2e.start_run``): after the test stopped its swarm, no
process started during the test may stay alive, by parent chain or process group.

Every test of those modules runs twice, once per ``policy.isolation`` (docs/scaling.md): the
``isolation`` fixture sets ``GOONDAN_ISOLATION``, which the ``goondan run`` each test starts
inherits and applies to its bundle's Swarm (whose policy does not set ``isolation``). A test that
only makes sense for one mode asks for it with ``@pytest.mark.isolation("process")``.

The tests of :data:`POOLED_UNDER_SOAK` SIGKILL the orchestrator itself: their subject is its
durable inbox and ingress, which no agent is part of. They take a third of the pooled half's time,
so ``make test`` runs them in process isolation only and ``make soak`` (``GOONDAN_SOAK=1``) in
both.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support import soak
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
    "test_pooled_run",
    "test_run_postgres",
    "test_studio_postgres",
)


ISOLATIONS = ("process", "pooled")
POOLED_UNDER_SOAK = frozenset({
    "test_sigkill_of_goondan_run_after_emit_delivers_each_event_once",
    "test_sigkill_of_goondan_run_after_a_webhook_200_delivers_each_event_once",
    "test_two_hundred_orchestrator_sigkills_lose_and_duplicate_nothing",
    "test_sigkill_of_goondan_run_after_send_is_acknowledged_runs_each_input_once",
    "test_two_hundred_orchestrator_sigkills_after_send_acks_lose_and_duplicate_nothing",
    "test_sigkill_of_goondan_run_after_a_send_ack_delivers_the_input_once_from_postgres",
    "test_webhook_events_acknowledged_before_a_sigkill_run_once_from_the_postgres_inbox",
})


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if (metafunc.module.__name__.rsplit(".", 1)[-1] in RUN_MODULES
            and "isolation" in metafunc.fixturenames):
        marker = metafunc.definition.get_closest_marker("isolation")
        modes = marker.args if marker is not None else ISOLATIONS
        if metafunc.function.__name__ in POOLED_UNDER_SOAK and not soak.soaking():
            modes = tuple(m for m in modes if m != "pooled")
        metafunc.parametrize("isolation", modes, indirect=True)


@pytest.fixture(autouse=True)
def isolation(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """``process`` or ``pooled``: the isolation the test's ``goondan run`` uses."""
    mode = str(getattr(request, "param", "process"))
    monkeypatch.setenv("GOONDAN_ISOLATION", mode)
    return mode


@pytest.fixture(autouse=True)
def no_leftover_processes(request: pytest.FixtureRequest) -> Iterator[ProcessWatch | None]:
    yield from watch_run_module(request, RUN_MODULES)
