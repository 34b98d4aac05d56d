"""Listening connectors fail closed: a signing secret, or an explicit ``ALLOW_UNSIGNED``.

The built-in HTTP connectors (``webhook``, ``github``, ``slack``, ``discord`` of
``@goondan/base``) verify every request with a signing secret (for ``discord``, the
application's public key) of their Connection (docs/base-connectors.md). A secret
that resolves to nothing — ``valueFrom: {env: X}`` with ``X`` unset — used to turn the check
off with only a warning in a log file, so a typo in a deployment opened the port to anyone.
Now such a Connection does not start: ``goondan run`` checks the running Swarm's Connections
before it spawns anything (:func:`check_connections_signed`) and the connector checks again at
start (:func:`signing_secret`), both with ``E_CONNECTOR_UNSIGNED``. A Connection that is meant
to take unsigned requests says so with ``config.ALLOW_UNSIGNED: "true"``.

:data:`LISTENING_CONNECTORS` names the secrets each built-in listening connector reads, in the
order it reads them; the connectors and the start-up check share this one table.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from goondan.config.values import env_names
from goondan.connectors.event import ConnectorContext
from goondan.connectors.spec import ConnectionSpec, resolve_connection_values
from goondan.errors import ConnectorError

__all__ = [
    "ALLOW_UNSIGNED",
    "AUTH_TOKEN",
    "DISCORD_KEY",
    "LISTENING_CONNECTORS",
    "SLACK_SECRET",
    "UNSIGNED_CODE",
    "WEBHOOK_SECRET",
    "SecretNames",
    "allows_unsigned",
    "check_connections_signed",
    "signing_secret",
]

ALLOW_UNSIGNED = "ALLOW_UNSIGNED"
UNSIGNED_CODE = "E_CONNECTOR_UNSIGNED"


@dataclass(frozen=True)
class SecretNames:
    """Where a connector looks for its signing secret: ``secrets`` names first, then ``config``
    names (Slack's reference also reads ``config.SLACK_SIGNING_SECRET``)."""

    secrets: tuple[str, ...]
    config: tuple[str, ...] = ()
    what: str = "signing secret"
    allow_flag: str = "ALLOW_UNSIGNED"  # the config switch that accepts requests without it

    def find(self, config: Mapping[str, str], secrets: Mapping[str, str]) -> str | None:
        """The first non-blank value, or ``None``."""
        for source, names in ((secrets, self.secrets), (config, self.config)):
            for name in names:
                value = source.get(name)
                if isinstance(value, str) and value.strip():
                    return value
        return None

    def describe(self) -> str:
        """``secrets.A, secrets.B or config.C`` for messages."""
        names = [f"secrets.{n}" for n in self.secrets] + [f"config.{n}" for n in self.config]
        return ", ".join(names[:-1]) + f" or {names[-1]}" if len(names) > 1 else names[0]


# The recommended names of connectors.md §5 (SIGNING_SECRET, WEBHOOK_SECRET) and the legacy
# ``signingSecret`` (verify.webhook.signingSecret) for all three.
WEBHOOK_SECRET = SecretNames(("SIGNING_SECRET", "WEBHOOK_SECRET", "signingSecret"))
SLACK_SECRET = SecretNames(
    ("SLACK_SIGNING_SECRET", "SIGNING_SECRET", "WEBHOOK_SECRET", "signingSecret"),
    config=("SLACK_SIGNING_SECRET",),
)

# Discord signs with an Ed25519 key pair: the Connection holds the public key (not secret, so
# config is read too).
DISCORD_KEY = SecretNames(("DISCORD_PUBLIC_KEY", "publicKey"), config=("DISCORD_PUBLIC_KEY",))

# The MCP and A2A servers take a bearer token rather than a signature (docs/serving.md).
AUTH_TOKEN = SecretNames(("AUTH_TOKEN",), what="auth token", allow_flag="ALLOW_UNAUTHENTICATED")

LISTENING_CONNECTORS: dict[tuple[str | None, str], SecretNames] = {
    ("@goondan/base", "webhook"): WEBHOOK_SECRET,
    ("@goondan/base", "github"): WEBHOOK_SECRET,
    ("@goondan/base", "slack"): SLACK_SECRET,
    ("@goondan/base", "discord"): DISCORD_KEY,
    ("@goondan/base", "mcp-server"): AUTH_TOKEN,
    ("@goondan/base", "a2a"): AUTH_TOKEN,
}


def allows_unsigned(config: Mapping[str, str], flag: str = ALLOW_UNSIGNED) -> bool:
    """``config.ALLOW_UNSIGNED`` (or ``flag``) is ``"true"`` (any case); any other value keeps
    the check."""
    value = config.get(flag)
    return isinstance(value, str) and value.strip().lower() == "true"


def _suggestion(names: SecretNames, env_names: Iterable[str]) -> str:
    envs = sorted(set(env_names))
    first = f"export {envs[0]}=<secret> (the sender uses the same value)" if envs else \
        f"set {names.secrets[0]} in spec.secrets of the Connection"
    return (f"{first}, or set spec.config.{names.allow_flag}: \"true\" on the Connection to accept "
            "unauthenticated requests from anyone who can reach the port")


def unsigned_error(connection: str, connector: str, names: SecretNames,
                   env_names: Iterable[str] = ()) -> ConnectorError:
    """``E_CONNECTOR_UNSIGNED`` for one Connection (names only, never values)."""
    envs = sorted(set(env_names))
    unset = f" (environment variable {', '.join(envs)} is unset)" if envs else ""
    return ConnectorError(
        f"Connection {connection!r} (connector {connector}) has no {names.what}{unset}: it would "
        f"accept unauthenticated requests; looked for {names.describe()}",
        code=UNSIGNED_CODE,
        suggestion=_suggestion(names, envs),
        location=f"Connection/{connection}",
    )


def signing_secret(ctx: ConnectorContext, names: SecretNames) -> str | None:
    """The signing secret of a starting listening connector; ``None`` only when its
    Connection allows unsigned requests (a warning is logged). Raises ``E_CONNECTOR_UNSIGNED``
    otherwise."""
    secret = names.find(ctx.config, ctx.secrets)
    if secret is not None:
        return secret
    if not allows_unsigned(ctx.config, names.allow_flag):
        raise unsigned_error(ctx.connection_name, ctx.connector_name, names)
    ctx.logger.warning("Connection %s has no %s and %s is \"true\": requests are not "
                       "authenticated", ctx.connection_name, names.what, names.allow_flag)
    return None


def check_connections_signed(specs: Iterable[ConnectionSpec], env: Mapping[str, str]) -> None:
    """The start-up check of ``goondan run``: raise ``E_CONNECTOR_UNSIGNED`` for the first
    listening Connection among ``specs`` that resolves no signing secret in ``env`` and does
    not allow unsigned requests."""
    for spec in specs:
        names = LISTENING_CONNECTORS.get((spec.connector_package, spec.connector))
        if names is None:
            continue
        config, secrets, _ = resolve_connection_values(spec, env)
        if names.find(config, secrets) is not None or allows_unsigned(config, names.allow_flag):
            continue
        envs = [e for n in names.secrets for e in env_names(spec.secrets.get(n), field=n)]
        envs += [e for n in names.config for e in env_names(spec.config.get(n), field=n)]
        raise unsigned_error(spec.name, spec.connector, names, envs)
