"""The storage backends (jsonl, postgres) for the runtime tests: tests/support/backends.py."""

from tests.support.backends import storage

__all__ = ["storage"]
