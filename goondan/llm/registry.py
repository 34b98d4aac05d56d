"""Model resource → :class:`LanguageModel`: looks the provider up in the one table
(``goondan/config/providers.py``: built-in rows, then the ``goondan.providers`` entry points of
installed distributions) and calls its factory.

A factory is ``factory(spec, *, retry_policy, base_dir) -> LanguageModel``, named as
``"module:attribute"`` and imported only here, so that ``goondan --help`` never loads urllib3 or
a third-party provider.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from goondan.config.providers import PROVIDER_NAMES, Provider, find_provider, installed_providers
from goondan.errors import ConfigError
from goondan.llm.base import LanguageModel, ModelSpec

if TYPE_CHECKING:  # urllib3 is imported only when a real adapter is built
    from goondan.llm.http import RetryPolicy

__all__ = ["create_model", "load_factory"]


def create_model(
    spec: ModelSpec,
    *,
    retry_policy: RetryPolicy | None = None,
    base_dir: Path | None = None,
) -> LanguageModel:
    """Build the adapter for ``spec``; never touches the network or resolves the key yet.

    ``retry_policy`` replaces the default :class:`RetryPolicy` (tests inject tiny delays and a
    recording sleep). ``base_dir`` is the bundle root, for ``scripted`` script files.
    Unknown providers, a missing required endpoint and a factory that cannot be loaded raise
    ``ConfigError``.
    """
    row = find_provider(spec.provider)
    model_ref = f"Model/{spec.name}" if spec.name else "the Model"
    if row is None:
        names = [*PROVIDER_NAMES, *sorted(installed_providers())]
        raise ConfigError(
            f"{model_ref} has unknown provider {spec.provider!r}",
            code="E_LLM_UNKNOWN_PROVIDER",
            suggestion="Use one of: " + ", ".join(names) + ".",
        )
    if row.endpoint_required and not spec.endpoint:
        raise ConfigError(
            f"{model_ref} uses provider {row.name} without spec.endpoint",
            code="E_LLM_ENDPOINT_REQUIRED",
            suggestion="Set spec.endpoint to the server's base URL, e.g. http://localhost:11434/v1.",
        )
    model = load_factory(row, model_ref)(spec, retry_policy=retry_policy, base_dir=base_dir)
    if not isinstance(model, LanguageModel):
        raise _load_error(
            row, model_ref, f"its factory returned {type(model).__name__}, not a LanguageModel"
        )
    return model


def load_factory(row: Provider, model_ref: str = "the Model") -> Any:
    """Import the factory of ``row`` (``"module:attribute"``); a failure is E_LLM_PROVIDER_LOAD."""
    module_name, _, attribute = row.factory.partition(":")
    try:
        target: Any = importlib.import_module(module_name.strip())
        for part in attribute.strip().split(".") if attribute.strip() else ():
            target = getattr(target, part)
    except Exception as exc:
        if row.distribution is None:
            raise  # a built-in adapter that cannot be imported is a bug, not a configuration
        # third-party code: any failure to import is the user's to fix
        raise _load_error(
            row, model_ref, f"{row.factory} cannot be loaded ({type(exc).__name__}: {exc})"
        ) from exc
    if not callable(target):
        raise _load_error(row, model_ref, f"{row.factory} is not callable")
    return target


def _load_error(row: Provider, model_ref: str, reason: str) -> ConfigError:
    source = f" from {row.distribution}" if row.distribution else ""
    return ConfigError(
        f"{model_ref}: provider {row.name}{source}: {reason}",
        code="E_LLM_PROVIDER_LOAD",
        suggestion="Reinstall or upgrade the distribution that provides it (pip), or check its "
                   "goondan.providers entry point (docs/packages.md \"Model providers\").",
    )
