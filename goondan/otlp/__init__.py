"""OTLP/HTTP traces: the fixed trace schema encoded with the standard library (``encode.py``)
and the variables that turn export on (docs/observability.md "OTLP export").

The exporter that turns runtime events into these spans is a runtime sink,
:mod:`goondan.runtime.otlp_exporter`; this package imports nothing of the runtime."""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["ENDPOINT_VARS", "endpoint_configured"]

# The variables that turn export on (goondan/runtime/otlp_exporter.py OtlpConfig.from_env reads them).
ENDPOINT_VARS = ("GOONDAN_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")


def endpoint_configured(env: Mapping[str, str]) -> bool:
    """Whether an OTLP endpoint is set; without one the exporter module is never imported."""
    return any(env.get(name, "").strip() for name in ENDPOINT_VARS)
