"""The Connections of a Swarm, read from a loaded bundle (docs/connectors.md).

:func:`connections_for_swarm` lists the Connections bound to the running Swarm: its
``swarmRef`` names that Swarm, or it has no ``swarmRef`` and the Swarm is the first one of the
Connection's package. Connections for another Swarm are not started (they are listed by
:func:`other_connections` so ``goondan run`` can say so). :func:`resolve_connection_values`
turns ``spec.config``/``spec.secrets`` into strings for ``ctx.config``/``ctx.secrets``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from goondan.config.refs import parse_ref
from goondan.config.resources import Resource
from goondan.config.schema import Checker
from goondan.config.values import resolve_value
from goondan.connectors.routing import IngressRule, parse_rules

__all__ = [
    "CLI_CONNECTOR",
    "ConnectionSpec",
    "connection_spec",
    "connections_for_swarm",
    "fingerprint",
    "other_connections",
    "resolve_connection_values",
]

# The built-in connector whose input ``goondan run`` feeds from the terminal (docs/connectors.md
# "The `cli` connector and `goondan run`").
CLI_CONNECTOR = ("@goondan/base", "cli")


@dataclass(frozen=True)
class ConnectionSpec:
    """One Connection with its Connector resolved; ``config``/``secrets`` are ValueSources."""

    name: str
    connector: str
    connector_package: str | None
    entry: Path
    swarm: str
    events: tuple[str, ...]
    rules: tuple[IngressRule, ...]
    config: Mapping[str, Any] = field(default_factory=dict)
    secrets: Mapping[str, Any] = field(default_factory=dict)
    resource: Resource | None = field(default=None, compare=False, repr=False)

    @property
    def is_cli(self) -> bool:
        """True for a Connection of the built-in ``cli`` connector."""
        return (self.connector_package, self.connector) == CLI_CONNECTOR


def fingerprint(spec: ConnectionSpec) -> str:
    """A digest of everything that shapes a Connection's process and routing: the spec (values
    as written, never resolved secrets) and the connector entry file's content."""
    try:
        entry = hashlib.sha256(spec.entry.read_bytes()).hexdigest()
    except OSError:
        entry = "unreadable"
    data = [spec.name, spec.connector, spec.connector_package, str(spec.entry), spec.swarm,
            list(spec.events), repr(spec.rules), spec.config, spec.secrets, entry]
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=repr).encode()).hexdigest()


def _silent() -> Checker:
    return Checker(None, None)


def _swarm_of(bundle: Any, res: Resource) -> str | None:
    ref_value = res.spec.get("swarmRef")
    if ref_value is not None:
        ref = parse_ref(ref_value, (), _silent(), ("Swarm",), bare_name_kind="Swarm")
        swarm = bundle.resolve(ref, res) if ref is not None else None
        return swarm.name if swarm is not None else None
    swarms = [s for s in bundle.of_kind("Swarm") if s.package == res.package]
    return swarms[0].name if swarms else None


def connection_spec(bundle: Any, res: Resource) -> ConnectionSpec | None:
    """The :class:`ConnectionSpec` of a Connection resource (``None`` if unresolvable, which a
    validated bundle never is)."""
    spec = res.spec
    ref = parse_ref(spec.get("connectorRef"), (), _silent(), ("Connector",))
    connector = bundle.resolve(ref, res) if ref is not None else None
    swarm = _swarm_of(bundle, res)
    if connector is None or swarm is None:
        return None

    def agent_name(value: Any) -> str | None:
        agent_ref = parse_ref(value, (), _silent(), ("Agent",), bare_name_kind="Agent")
        agent = bundle.resolve(agent_ref, res) if agent_ref is not None else None
        return agent.name if agent is not None else None

    ingress: dict[str, Any] = spec["ingress"] if isinstance(spec.get("ingress"), dict) else {}
    events = tuple(
        e["name"] for e in connector.spec.get("events") or []
        if isinstance(e, dict) and isinstance(e.get("name"), str)
    )
    secrets = dict(spec.get("secrets") or {})
    verify = spec.get("verify")
    webhook = verify.get("webhook") if isinstance(verify, dict) else None
    if isinstance(webhook, dict) and "signingSecret" in webhook:
        # Legacy ``verify.webhook.signingSecret`` feeds ``ctx.secrets["signingSecret"]``.
        secrets.setdefault("signingSecret", webhook["signingSecret"])
    return ConnectionSpec(
        name=res.name,
        connector=connector.name,
        connector_package=connector.package,
        entry=(connector.root / connector.spec["entry"]).absolute(),
        swarm=swarm,
        events=events,
        rules=tuple(parse_rules(ingress.get("rules"), agent_name)),
        config=dict(spec.get("config") or {}),
        secrets=secrets,
        resource=res,
    )


def _all(bundle: Any) -> list[ConnectionSpec]:
    out = []
    for res in bundle.of_kind("Connection"):
        found = connection_spec(bundle, res)
        if found is not None:
            out.append(found)
    return out


def connections_for_swarm(bundle: Any, swarm: str) -> list[ConnectionSpec]:
    """The Connections bound to Swarm ``swarm``, in load order."""
    return [c for c in _all(bundle) if c.swarm == swarm]


def other_connections(bundle: Any, swarm: str) -> list[ConnectionSpec]:
    """The Connections bound to another Swarm (not started by this run)."""
    return [c for c in _all(bundle) if c.swarm != swarm]


def resolve_connection_values(
    spec: ConnectionSpec, env: Mapping[str, str]
) -> tuple[dict[str, str], dict[str, str], list[str]]:
    """``(config, secrets, unset)``: resolved strings and the names of values that are unset.

    Secrets are registered for masking; config values are not (a port number would otherwise
    be masked everywhere)."""
    config: dict[str, str] = {}
    secrets: dict[str, str] = {}
    unset: list[str] = []
    for section, out, secret in (("config", config, False), ("secrets", secrets, True)):
        values = spec.config if section == "config" else spec.secrets
        for key, source in values.items():
            value = resolve_value(source, env, field=key, secret=secret)
            if value is None:
                unset.append(f"{section}.{key}")
            else:
                out[key] = value
    return config, secrets, unset
