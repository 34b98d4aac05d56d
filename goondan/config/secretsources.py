"""Every secret of a bundle, so that every process masks all of them (docs/security.md).

A process used to register only the secrets it resolved itself: an agent process its own
Model's key, a connector process its Connection's secrets. A tool in agent B could then print
agent A's key unmasked (it is in B's environment too, from the same ``.env``). Loading a bundle
now registers them all (:func:`register_bundle_secrets`, called by ``load_bundle_cached`` and
``load_bundle``):

* each Model's ``apiKey`` (a literal or the variable it names), else its provider's usual key
  variables (``OPENAI_API_KEY`` ...);
* each Connection's ``secrets`` and ``verify.webhook.signingSecret`` (not ``config``: a port
  number would then be masked everywhere);
* each MCP Tool's ``headers`` and the ``env`` values it reads from variables.

:func:`secret_env_names` lists the variables these read, without their values: a workspace
records them so that ``inspect`` run from elsewhere can still mask (``goondan.workspace.record``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from goondan.config.providers import PROVIDERS
from goondan.config.values import env_names, resolve_value
from goondan.secrets import register_secret

__all__ = ["register_bundle_secrets", "register_env_secrets", "secret_env_names", "secret_sources"]


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def secret_sources(bundle: Any) -> Iterator[tuple[Any, str | None, tuple[str, ...]]]:
    """``(ValueSource or None, field name, fallback variables)`` for every secret of ``bundle``;
    the fallback variables are read when the source is absent (a Model without ``apiKey``)."""
    for res in getattr(bundle, "resources", ()):
        spec = _mapping(res.spec)
        if res.kind == "Model":
            # A built-in provider's key variables; a third-party provider's are unknown here
            # (its adapter registers the key it resolves; docs/packages.md "Model providers").
            provider = spec.get("provider")
            row = PROVIDERS.get(provider.strip().lower()) if isinstance(provider, str) else None
            yield spec.get("apiKey"), "apiKey", row.key_env if row is not None else ()
        elif res.kind == "Connection":
            for key, source in _mapping(spec.get("secrets")).items():
                yield source, str(key), ()
            webhook = _mapping(_mapping(spec.get("verify")).get("webhook"))
            if "signingSecret" in webhook:
                yield webhook["signingSecret"], "signingSecret", ()
        elif res.kind == "Tool":
            mcp = _mapping(spec.get("mcp"))
            for section in ("env", "headers"):
                for key, source in _mapping(mcp.get(section)).items():
                    # A literal env value is a setting (TZ: UTC, LOG_LEVEL: debug), not a secret.
                    if section == "headers" or "valueFrom" in _mapping(source):
                        yield source, f"{section}.{key}", ()
            for key, source in _mapping(_mapping(spec.get("a2a")).get("headers")).items():
                yield source, f"headers.{key}", ()


def register_bundle_secrets(bundle: Any, env: Mapping[str, str]) -> int:
    """Register every secret of ``bundle`` found in ``env`` (or given literally); returns how
    many values were found. Never fails: an odd ValueSource is skipped."""
    found = 0
    for source, field, fallback in secret_sources(bundle):
        value = resolve_value(source, env, field=field) if source is not None else None
        if value is None and source is None:
            value = next((env[n] for n in fallback if (env.get(n) or "").strip()), None)
            register_secret(value)
        found += value is not None
    return found


def secret_env_names(bundle: Any) -> list[str]:
    """The environment variables the secrets of ``bundle`` are read from (names only)."""
    names: list[str] = []
    for source, field, fallback in secret_sources(bundle):
        for name in (env_names(source, field=field) if source is not None else fallback):
            if name not in names:
                names.append(name)
    return names


def register_env_secrets(names: list[str], env: Mapping[str, str]) -> int:
    """Register the values of the variables ``names`` that ``env`` sets; returns how many."""
    found = 0
    for name in names:
        value = env.get(name) if isinstance(name, str) else None
        if value and value.strip():
            register_secret(value)
            found += 1
    return found
