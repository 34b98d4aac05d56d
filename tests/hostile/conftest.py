"""The hostile tests that start ``goondan run`` leave no process behind either (issue 27
item 5; the same check as tests/e2e/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.process_tree import ProcessWatch, watch_run_module

RUN_MODULES = (
    "test_connector_unsigned",
    "test_input_text",
    "test_misc_extensions",
    "test_run_control_frames",
    "test_run_single_orchestrator",
    "test_secrets_file_modes",
    "test_secrets_processes",
    "test_tools_jobs_after_run",
)


@pytest.fixture(autouse=True)
def no_leftover_processes(request: pytest.FixtureRequest) -> Iterator[ProcessWatch | None]:
    yield from watch_run_module(request, RUN_MODULES)
