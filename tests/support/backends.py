"""The storage backends the contract tests run against (docs/storage.md "Storage contract").

``storage`` is what a runtime test hands to ``Runtime.from_bundle(..., storage=...)``: None (the
JSONL state root, opened as the runtime does by default) or a PostgreSQL backend.

``backend`` is parametrised over ``jsonl`` (a temp state root) and ``postgres`` (a fresh database
of the test PostgreSQL, tests/support/postgres.py, with the migrations applied). ``store_spec``
names the same store so that another process (or a second handle in this one) can open it with
:func:`open_backend`. Registered by the conftest.py of the test directories that use them.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from goondan.storage.contract import StorageBackend

__all__ = [
    "BACKENDS", "apply_schema", "backend", "backend_name", "open_backend", "storage", "store_spec",
]

BACKENDS = ("jsonl", "postgres")


def apply_schema(url: str) -> None:
    """Create the tables: the migrations, as a PostgreSQL store applies them at open."""
    from goondan.storage.postgres.db import Database

    Database.open(url).close()


def open_backend(spec: tuple[str, str]) -> Any:
    """A new backend object on the store ``spec`` (``("jsonl", root)`` or ``("postgres", url)``)."""
    kind, where = spec
    if kind == "jsonl":
        from goondan.storage.jsonl import JsonlBackend

        return JsonlBackend(Path(where))
    from goondan.storage.postgres.backend import PostgresBackend

    return PostgresBackend.open(where)


@pytest.fixture(params=BACKENDS)
def backend_name(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def store_spec(backend_name: str, request: pytest.FixtureRequest,
               tmp_path: Path) -> tuple[str, str]:
    if backend_name == "jsonl":
        return ("jsonl", str(tmp_path / "store"))
    url = str(request.getfixturevalue("postgres_url"))
    apply_schema(url)
    return ("postgres", url)


@pytest.fixture
def backend(store_spec: tuple[str, str]) -> Iterator[StorageBackend]:
    opened = open_backend(store_spec)
    try:
        yield opened
    finally:
        opened.close()


@pytest.fixture(params=BACKENDS)
def storage(request: pytest.FixtureRequest) -> Iterator[StorageBackend | None]:
    if request.param == "jsonl":
        yield None
        return
    url = str(request.getfixturevalue("postgres_url"))
    opened = open_backend(("postgres", url))
    try:
        yield opened
    finally:
        opened.close()
