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
    "test_pooled_run",
)


ISOLATIONS = ("process", "pooled")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if (metafunc.module.__name__.rsplit(".", 1)[-1] in RUN_MODULES
            and "isolation" in metafunc.fixturenames):
        marker = metafunc.definition.get_closest_marker("isolation")
        modes = marker.args if marker is not None else ISOLATIONS
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
