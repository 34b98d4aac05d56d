"""OTLP/HTTP trace export: the fixed trace schema encoded with the standard library, and a
background batch exporter (docs/observability.md "OTLP export")."""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["ENDPOINT_VARS", "endpoint_configured"]

# The variables that turn export on (goondan/otlp/exporter.py OtlpConfig.from_env reads them).
ENDPOINT_VARS = ("GOONDAN_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")


def endpoint_configured(env: Mapping[str, str]) -> bool:
    """Whether an OTLP endpoint is set; without one the exporter module is never imported."""
    return any(env.get(name, "").strip() for name in ENDPOINT_VARS)
