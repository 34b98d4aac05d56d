"""Fixtures for the model adapter tests: the fake provider server, one per test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.fake_provider import FakeProvider


@pytest.fixture
def fake_provider() -> Iterator[FakeProvider]:
    """A fresh loopback server on 127.0.0.1:0 speaking the OpenAI/Anthropic/Gemini formats."""
    with FakeProvider() as server:
        yield server
