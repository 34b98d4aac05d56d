"""The storage backends (jsonl, postgres) for the tests here: tests/support/backends.py."""

from tests.support.backends import backend, backend_name, store_spec

__all__ = ["backend", "backend_name", "store_spec"]
