"""Session-wide test policy: isolated state root, no API keys, loopback-only network."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import network_guard

pytest_plugins = ["tests.support.postgres"]

network_guard.install()

_SECRET_SUFFIXES = ("_API_KEY", "_TOKEN", "_SECRET")


@pytest.fixture(autouse=True)
def _isolated_environment(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Path]:
    """Point GOONDAN_STATE_ROOT and HOME at temp dirs and strip every API key variable."""
    state_root = tmp_path_factory.mktemp("state-root")
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("GOONDAN_STATE_ROOT", str(state_root))
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("NO_COLOR", "1")
    # Second line of defence (also reaches agent subprocesses): adapters refuse non-loopback URLs.
    monkeypatch.setenv("GOONDAN_ALLOW_MODEL_REQUESTS", "0")
    for name in list(os.environ):
        # An OTLP endpoint of the developer's shell must not receive the tests' spans.
        if (
            name.endswith(_SECRET_SUFFIXES)
            or name.startswith(("GOONDAN_SECRET_", "OTEL_EXPORTER_OTLP"))
            or name == "GOONDAN_OTLP_ENDPOINT"
        ):
            monkeypatch.delenv(name, raising=False)
    yield state_root


@pytest.fixture
def state_root(_isolated_environment: Path) -> Path:
    """The temp state root every test gets (also exported as GOONDAN_STATE_ROOT)."""
    return _isolated_environment


@pytest.fixture
def repo_root() -> Path:
    return Path(__file__).resolve().parent.parent
