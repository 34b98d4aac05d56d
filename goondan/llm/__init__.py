"""Model adapters: one contract (base.py), the transport on goondan/http (http.py), providers, test
models.

``create_model(spec)`` (``registry.py``) is the entry point; see docs/models.md. The transport
and provider modules are imported lazily, so importing this package stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from goondan.llm.base import (
    FinishReason,
    LanguageModel,
    ModelRequest,
    ModelResponse,
    ModelSpec,
    StreamDelta,
)

if TYPE_CHECKING:
    from goondan.llm.http import RetryPolicy
    from goondan.llm.registry import create_model

__all__ = [
    "FinishReason",
    "LanguageModel",
    "ModelRequest",
    "ModelResponse",
    "ModelSpec",
    "RetryPolicy",
    "StreamDelta",
    "create_model",
]


def __getattr__(name: str) -> Any:
    # urllib3 is only imported when a real adapter or the retry policy is actually used.
    if name == "create_model":
        from goondan.llm.registry import create_model

        return create_model
    if name == "RetryPolicy":
        from goondan.llm.http import RetryPolicy

        return RetryPolicy
    raise AttributeError(f"module 'goondan.llm' has no attribute {name!r}")
