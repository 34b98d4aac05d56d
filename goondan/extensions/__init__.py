"""Extensions: ``register(api)`` loading in declaration order, the ``ExtensionApi`` and state."""

from __future__ import annotations

from goondan.extensions.api import ExtensionApi, FrozenDict
from goondan.extensions.loader import ExtensionSet, LoadedExtension, load_extensions
from goondan.extensions.state import ExtensionState, MemoryStateStore, StateStore

__all__ = [
    "ExtensionApi",
    "ExtensionSet",
    "ExtensionState",
    "FrozenDict",
    "LoadedExtension",
    "MemoryStateStore",
    "StateStore",
    "load_extensions",
]
