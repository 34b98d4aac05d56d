"""Config, secrets, signatures and the HTTP serving loop shared by the ``@goondan/base``
connectors (docs/base-connectors.md).

``ctx.config`` and ``ctx.secrets`` hold resolved strings; a value that cannot be used (a
``PORT`` that is not a number) raises ``E_BASE_CONNECTOR_CONFIG`` from ``run(ctx)``, which the
runtime reports and retries with backoff.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from pathlib import Path

from goondan.connectors import ConnectorContext, ConnectorEvent, ConnectorEventError
from goondan.errors import ConnectorError
from goondan.workspace.files import atomic_write

from ._http import Handler, HttpServer, Response

__all__ = [
    "ADDRESS_FILE",
    "DEFAULT_MAX_BODY_BYTES",
    "BadBody",
    "bearer_matches",
    "config_bool",
    "config_error",
    "config_int",
    "emit_and_answer",
    "hmac_sha256_hex",
    "origin_allowed",
    "parse_json_body",
    "serve_http",
    "setting",
    "signature_matches",
    "timestamp_skew",
]

ADDRESS_FILE = "address.json"
DEFAULT_MAX_BODY_BYTES = 1024 * 1024
DEFAULT_MAX_CONNECTIONS = 1024
# Loopback load tests and reverse proxies send everything from one address: room for them,
# while one address alone cannot hold every slot.
DEFAULT_MAX_CONNECTIONS_PER_IP = 128


def config_error(ctx: ConnectorContext, message: str, suggestion: str) -> ConnectorError:
    """The error a connector raises at start for an unusable config value."""
    return ConnectorError(f"[{ctx.connection_name}] {message}", code="E_BASE_CONNECTOR_CONFIG",
                          suggestion=suggestion)


def setting(ctx: ConnectorContext, *names: str, secrets: bool = False) -> str | None:
    """The first non-blank ``ctx.config[name]`` (then ``ctx.secrets[name]`` if ``secrets``)."""
    sources = (ctx.config, ctx.secrets) if secrets else (ctx.config,)
    for source in sources:
        for name in names:
            value = source.get(name)
            if isinstance(value, str) and value.strip():
                return value.strip()
    return None


def config_int(ctx: ConnectorContext, *names: str, default: int | None, minimum: int = 0,
               maximum: int | None = None, secrets: bool = False) -> int:
    """An integer setting; missing → ``default`` (``None``: required)."""
    raw = setting(ctx, *names, secrets=secrets)
    if raw is None:
        if default is None:
            raise config_error(ctx, f"config {names[0]} is required",
                               f"set spec.config.{names[0]} of the Connection")
        return default
    try:
        value = int(raw)
    except ValueError:
        raise config_error(ctx, f"config {names[0]} must be an integer, got {raw!r}",
                           f"set spec.config.{names[0]} to a whole number") from None
    if value < minimum or (maximum is not None and value > maximum):
        bound = f"between {minimum} and {maximum}" if maximum is not None else f"at least {minimum}"
        raise config_error(ctx, f"config {names[0]} must be {bound}, got {value}",
                           f"set spec.config.{names[0]} to a value {bound}")
    return value


def config_bool(ctx: ConnectorContext, name: str, *, default: bool) -> bool:
    """A ``"true"``/``"false"`` setting (any case); another value is a config error rather than
    a guess, since these settings switch checks on."""
    raw = setting(ctx, name)
    if raw is None:
        return default
    if raw.lower() not in ("true", "false"):
        raise config_error(ctx, f"config {name} must be \"true\" or \"false\", got {raw!r}",
                           f"set spec.config.{name} to \"true\" or \"false\"")
    return raw.lower() == "true"


class BadBody(ValueError):
    """A request body the connector refuses with 400; ``str()`` is the reason it answers."""


def parse_json_body(body: bytes) -> object:
    """The JSON value of a request body.

    Raises :class:`BadBody` ``invalid_json`` for what is not UTF-8 JSON and ``json_too_deep``
    for arrays and objects nested deeper than the parser's recursion limit (about 1,000
    levels), which would otherwise escape as a ``RecursionError`` and answer 500."""
    try:
        return json.loads(body)
    except RecursionError:
        raise BadBody("json_too_deep") from None
    except (ValueError, UnicodeDecodeError):
        raise BadBody("invalid_json") from None


def bearer_matches(expected: str, header: str) -> bool:
    """Is ``header`` (an ``Authorization`` value) ``Bearer <expected>``? Compared in constant
    time."""
    scheme, _, given = header.strip().partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(expected.encode(), given.strip().encode("utf-8", "replace"))


LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")


def origin_allowed(origin: str, allowed: tuple[str, ...]) -> bool:
    """Is a request with this ``Origin`` header acceptable: none (not a browser), one of
    ``allowed``, or a loopback page? A foreign page must not reach a local server through the
    user's browser (DNS rebinding)."""
    if not origin or origin in allowed:
        return True
    host = origin.split("://", 1)[-1].rsplit(":", 1)[0] if "]" not in origin else \
        origin.split("://", 1)[-1].split("]")[0] + "]"
    return host in LOOPBACK_HOSTS


def hmac_sha256_hex(secret: str, data: bytes) -> str:
    """Hex HMAC-SHA256 of ``data`` keyed with ``secret``."""
    return hmac.new(secret.encode("utf-8"), data, hashlib.sha256).hexdigest()


def timestamp_skew(timestamp: str, now: float) -> float | None:
    """Seconds between the Unix-seconds ``timestamp`` of a signed request and ``now``; ``None``
    when it is not 1 to 12 ASCII digits (a sign, a fraction, or a number too large to subtract
    from a float, which would otherwise fail the handler with 500)."""
    if not (timestamp.isascii() and timestamp.isdigit() and len(timestamp) <= 12):
        return None
    return abs(now - int(timestamp))


def signature_matches(secret: str, body: bytes, header: str) -> bool:
    """Does ``header`` (``sha256=<hex>`` or bare hex) sign ``body`` with ``secret``?
    Compared in constant time."""
    given = header.strip()
    if given[:7].lower() == "sha256=":
        given = given[7:]
    expected = hmac_sha256_hex(secret, body)
    return hmac.compare_digest(expected.encode(), given.lower().encode("ascii", "replace"))


def _write_address(ctx: ConnectorContext, server: HttpServer) -> Path:
    path = Path(ctx.state_dir) / ADDRESS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {"host": server.host, "port": server.port, "path": server.path,
            "url": f"http://{server.host}:{server.port}{server.path}"}
    atomic_write(path, (json.dumps(data) + "\n").encode())
    return path


async def serve_http(
    ctx: ConnectorContext,
    handler: Handler,
    *,
    port: int,
    path: str,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    methods: tuple[str, ...] = ("POST",),
    extra_paths: tuple[str, ...] = (),
    prefixes: tuple[str, ...] = (),
) -> None:
    """Run an :class:`HttpServer` for ``handler`` until cancelled.

    The bound address is logged and written to ``<state_dir>/address.json`` (atomically; removed
    again when the server stops), so a Connection with ``PORT: 0`` can be found by tests and
    scripts.
    """
    host = setting(ctx, "HOST") or "127.0.0.1"
    if not path.startswith("/"):
        raise config_error(ctx, f"path {path!r} must start with '/'", "write the path as /hooks")
    connections = config_int(ctx, "MAX_CONNECTIONS", default=DEFAULT_MAX_CONNECTIONS, minimum=1)
    per_ip = config_int(
        ctx, "MAX_CONNECTIONS_PER_IP", default=DEFAULT_MAX_CONNECTIONS_PER_IP, minimum=1
    )
    server = HttpServer(
        handler,
        host=host,
        port=port,
        path=path,
        extra_paths=extra_paths,
        prefixes=prefixes,
        methods=methods,
        max_body_bytes=max_body_bytes,
        max_connections=connections,
        max_connections_per_ip=per_ip,
        logger=ctx.logger,
    )
    address = Path(ctx.state_dir) / ADDRESS_FILE
    address.unlink(missing_ok=True)  # a stale address must not be mistaken for this run's
    try:
        await server.start()
    except OSError as exc:
        raise config_error(ctx, f"cannot listen on {host}:{port}: {exc.strerror or exc}",
                           "pick a free PORT or stop the process using it") from exc
    _write_address(ctx, server)
    ctx.logger.info("%s listening on http://%s:%d%s", ctx.connector_name, host, server.port, path)
    try:
        await server.serve_forever()
    finally:
        _remove_own_address(address, server.port)


def _remove_own_address(path: Path, port: int) -> None:
    """Remove ``address.json`` only while it still names this server: a connector orphaned by a
    killed orchestrator may exit after the next run's connector wrote its own address."""
    try:
        if int(json.loads(path.read_text())["port"]) != port:
            return
    except (OSError, ValueError, KeyError, TypeError):
        return
    path.unlink(missing_ok=True)


async def emit_and_answer(ctx: ConnectorContext, event: ConnectorEvent, *,
                          accepted: dict[str, object] | None = None) -> Response:
    """``await ctx.emit(event)`` and answer 200 only after it returned: with ``accepted`` as
    the body when given (a protocol's own acknowledgement), else the receipt."""
    try:
        receipt = await ctx.emit(event)
    except ConnectorEventError as exc:
        ctx.logger.warning("event refused: %s", exc.message)
        return Response.error(400, "invalid_event")
    except Exception as exc:  # the inbox could not store it: the sender should retry
        ctx.logger.error("event %s could not be stored: %s", event.id, exc)
        return Response.error(503, "not_stored")
    if accepted is not None:
        return Response.json(200, accepted)
    body: dict[str, object] = {"accepted": True, "eventName": event.name,
                               "instanceKey": event.instance_key, "id": receipt.id,
                               "duplicate": receipt.duplicate}
    if receipt.dropped:  # no ingress rule matches: nothing stored, no Turn (retrying will not help)
        body["dropped"] = True
    return Response.json(200, body)
