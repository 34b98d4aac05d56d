"""ValueSource: ``{value}`` | ``{valueFrom: {env}}`` | ``{valueFrom: {secretRef: {ref, key}}}``.

Resolution never substitutes ``""`` for a missing value: an unset variable resolves to ``None``
and the caller decides (the LLM layer raises ``E_LLM_AUTH`` when a key is really needed).
Every resolved value is registered with :func:`goondan.secrets.register_secret` so it is masked
in logs and errors from then on.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from goondan.config.schema import Checker, did_you_mean, type_name
from goondan.config.yamlsource import FieldPath, format_field
from goondan.secrets import register_secret

__all__ = ["check_value_source", "env_names", "resolve_value", "secret_env_names"]


def _unknown(ck: Checker, key: str, path: FieldPath, allowed: tuple[str, ...]) -> None:
    guess = did_you_mean(key, allowed)
    ck.error(f"unknown field {key!r} in {format_field(path)}", (*path, key),
             f"did you mean {guess!r}?" if guess else f"allowed: {', '.join(allowed)}",
             code="E_CONFIG_UNKNOWN_FIELD", key=True)


def check_value_source(value: Any, path: FieldPath, ck: Checker) -> bool:
    """Schema check: exactly one of value/valueFrom, exactly one of env/secretRef."""
    where = format_field(path)
    example = "{valueFrom: {env: MY_VAR}}"
    if isinstance(value, str):
        ck.error(f"{where} must be a ValueSource mapping, not a bare string", path,
                 f"write {{value: ...}} or {example}")
        return False
    if not isinstance(value, dict):
        ck.error(f"{where} must be a ValueSource mapping, got {type_name(value)}", path,
                 f"write {example}")
        return False
    extra = [k for k in value if k not in ("value", "valueFrom") and not k.startswith("x-")]
    for key in extra:
        _unknown(ck, key, path, ("value", "valueFrom"))
    if extra:
        return False
    if ("value" in value) == ("valueFrom" in value):
        ck.error(f"{where} needs exactly one of 'value' or 'valueFrom'", path, f"write {example}")
        return False
    if "value" in value:
        if not isinstance(value["value"], str):
            ck.error(f"{where}.value must be a string, got {type_name(value['value'])}",
                     (*path, "value"), 'quote it: value: "123"')
            return False
        return True
    source = value["valueFrom"]
    spath = (*path, "valueFrom")
    if not isinstance(source, dict):
        ck.error(
            f"{where}.valueFrom must be a mapping, got {type_name(source)}",
            spath,
            f"write {example}",
        )
        return False
    extra = [k for k in source if k not in ("env", "secretRef") and not k.startswith("x-")]
    for key in extra:
        _unknown(ck, key, spath, ("env", "secretRef"))
    if extra:
        return False
    if ("env" in source) == ("secretRef" in source):
        ck.error(
            f"{where}.valueFrom needs exactly one of 'env' or 'secretRef'",
            spath,
            f"write {example}",
        )
        return False
    if "env" in source:
        env = source["env"]
        if not isinstance(env, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", env):
            ck.error(f"{where}.valueFrom.env must be an environment variable name", (*spath, "env"),
                     "use letters, digits and '_', e.g. OPENAI_API_KEY")
            return False
        return True
    ref = source["secretRef"]
    rpath = (*spath, "secretRef")
    if not isinstance(ref, dict):
        ck.error("secretRef must be a mapping {ref: Secret/<name>, key?}", rpath,
                 "write secretRef: {ref: Secret/github-app, key: private_key}")
        return False
    ok = True
    for key in ref:
        if key not in ("ref", "key") and not key.startswith("x-"):
            _unknown(ck, key, rpath, ("ref", "key"))
            ok = False
    target = ref.get("ref")
    if not isinstance(target, str) or not re.fullmatch(r"Secret/[^/\s]+", target):
        ck.error(
            "secretRef.ref must be 'Secret/<name>'",
            (*rpath, "ref") if "ref" in ref else rpath,
            "write ref: Secret/github-app",
            code="E_CONFIG_INVALID_REF",
        )
        ok = False
    if "key" in ref and (not isinstance(ref["key"], str) or not ref["key"]):
        ck.error(
            "secretRef.key must be a non-empty string", (*rpath, "key"), "write key: private_key"
        )
        ok = False
    return ok


def _upper(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]", "_", text).upper()


def secret_env_names(name: str, key: str | None, field: str | None = None) -> list[str]:
    """Environment variables tried for ``Secret/<name>`` (docs/configuration.md
    "Values and secrets"), in order."""
    out: list[str] = []
    for prefix in ("GOONDAN_SECRET_", "SECRET_"):
        base = prefix + _upper(name)
        for part in (key, field):
            if part:
                candidate = f"{base}_{_upper(part)}"
                if candidate not in out:
                    out.append(candidate)
        out.append(base)
    return out


def env_names(value_source: Any, *, field: str | None = None) -> list[str]:
    """The environment variables a ValueSource reads (empty for a literal ``value``)."""
    if not isinstance(value_source, dict):
        return []
    source = value_source.get("valueFrom")
    if not isinstance(source, dict):
        return []
    if isinstance(source.get("env"), str):
        return [source["env"]]
    ref = source.get("secretRef")
    if isinstance(ref, dict) and isinstance(ref.get("ref"), str) and "/" in ref["ref"]:
        key = ref.get("key") if isinstance(ref.get("key"), str) else None
        return secret_env_names(ref["ref"].split("/", 1)[1], key, field)
    return []


def resolve_value(value_source: dict[str, Any] | None, env: Mapping[str, str],
                  *, field: str | None = None, secret: bool = True) -> str | None:
    """Resolve a ValueSource against ``env``; ``None`` when unset or blank (never ``""``).

    ``field`` is the name of the field being resolved; a ``secretRef`` without ``key`` uses it
    as the key. The resolved value is registered for masking unless ``secret=False`` (plain
    settings such as a port number would otherwise be masked everywhere).
    """
    if not isinstance(value_source, dict):
        return None
    if "value" in value_source:
        literal = value_source["value"]
        if not isinstance(literal, str):
            return None
        if secret:
            register_secret(literal)
        return literal
    for name in env_names(value_source, field=field):
        found = env.get(name)
        if found is not None and found.strip():
            if secret:
                register_secret(found)
            return found
    return None
