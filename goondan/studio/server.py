"""The studio's HTTP server (stdlib ``ThreadingHTTPServer``): routing, access checks, files.

One thread per connection, so an open event stream never blocks another request. Access:

* bound to a loopback address, only a loopback ``Host`` header is answered (a web page that
  rebinds its own name to 127.0.0.1 cannot read the API);
* with a token, every ``/api`` request carries it (``Authorization: Bearer T`` or
  ``?token=T``; compared in constant time); a non-loopback address needs one
  (``E_STUDIO_TOKEN_REQUIRED``);
* a ``POST`` must be ``Content-Type: application/json`` from the same origin (another site's
  form cannot decide an approval).

Any GET path outside ``/api/`` and ``/static/`` answers the page shell (``static/index.html``);
the page routes on its location. See docs/studio.md.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import mimetypes
import select
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from goondan.errors import GoondanError, UsageError
from goondan.studio import data, live
from goondan.types import JsonObject

__all__ = ["STATIC_DIR", "StudioServer", "is_loopback"]

STATIC_DIR = Path(__file__).resolve().parent / "static"
_MAX_BODY = 64 * 1024
_TYPES = {".js": "text/javascript", ".css": "text/css", ".html": "text/html",
          ".svg": "image/svg+xml", ".png": "image/png", ".json": "application/json"}
_PAGE_CSP = ("default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; "
             "frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
_MISSING_PAGE = (b"<!doctype html><title>goondan studio</title><p>The studio's page is "
                 b"missing from this installation (goondan/studio/static/index.html); the JSON "
                 b"API is at <a href=\"/api/overview\">/api/overview</a>.</p>")


def is_loopback(host: str) -> bool:
    """``localhost`` or a loopback IP address (127.0.0.0/8, ::1)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    studio: StudioServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that went away mid-answer is not the server's error


class _IPv6HTTPServer(_HTTPServer):
    address_family = socket.AF_INET6


class StudioServer:
    """The studio on ``host:port`` (``port`` 0: a free one) over ``state_root``."""

    def __init__(self, state_root: Path, *, host: str = "127.0.0.1", port: int = 0,
                 token: str | None = None, static_dir: Path = STATIC_DIR,
                 bundles: tuple[Path, ...] = (), backend: Any = None,
                 store: str | None = None) -> None:
        self.loopback = is_loopback(host)
        if not self.loopback and not token:
            raise UsageError(
                f"binding the studio to {host} (not a loopback address) needs --token",
                code="E_STUDIO_TOKEN_REQUIRED",
                suggestion="pass --token with a long random value (every API request then "
                "needs it), or keep the default --host 127.0.0.1",
            )
        self.state_root = Path(state_root)
        self.backend = backend  # a PostgreSQL store (goondan.studio.store), else None: files
        self.store = store  # its masked URL
        self.token = token or None
        self.bundles = bundles
        self._secret_sources: tuple[tuple[str, int], ...] | None = None
        self._secrets_lock = threading.Lock()
        self.static_dir = static_dir
        self.stopping = threading.Event()
        server_class = _IPv6HTTPServer if ":" in host else _HTTPServer
        try:
            self.httpd = server_class((host.strip("[]"), port), _Handler)
        except OSError as exc:
            raise UsageError(
                f"cannot listen on {host}:{port}: {exc.strerror or exc}", code="E_STUDIO_BIND",
                suggestion="choose another --port (--port 0 picks a free one)") from None
        self.httpd.studio = self
        self.host = host
        self.port = int(self.httpd.server_address[1])
        self._thread: threading.Thread | None = None

    def __repr__(self) -> str:
        return f"<StudioServer {self.url} {self.state_root}>"

    @property
    def url(self) -> str:
        """The page's address (without the token)."""
        shown = "127.0.0.1" if self.host in ("", "0.0.0.0") else self.host
        if ":" in shown and not shown.startswith("["):
            shown = f"[{shown}]"
        return f"http://{shown}:{self.port}/"

    def refresh_secrets(self) -> None:
        """Register for masking the secrets of every bundle the state root knows — the
        recorded workspaces', the running swarms', ``bundles`` (else the current directory's) —
        again whenever a workspace or a running swarm appeared or changed since the last call
        (a few ``stat`` calls when nothing did), so that a swarm started after the studio is
        masked too."""
        sources = _secret_sources(self.state_root)
        with self._secrets_lock:
            if sources == self._secret_sources:
                return
            from goondan.commands.common import register_bundle_secrets

            register_bundle_secrets(self.state_root, bundles=self.bundles)
            self._secret_sources = sources

    def serve_forever(self) -> None:
        """Answer requests until :meth:`close` (or Ctrl-C in the caller)."""
        self.httpd.serve_forever(poll_interval=0.25)

    def start(self) -> StudioServer:
        """Serve on a background thread (tests, embedding); :meth:`close` stops it."""
        self._thread = threading.Thread(target=self.serve_forever, name="studio", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving: open event streams end, the socket is closed."""
        self.stopping.set()
        if self._thread is not None:
            self.httpd.shutdown()
            self._thread.join(timeout=5)
        self.httpd.server_close()

    def __enter__(self) -> StudioServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _secret_sources(state_root: Path) -> tuple[tuple[str, int], ...]:
    """What :meth:`StudioServer.refresh_secrets` reads, by name and modification time."""
    runtime = state_root / "runtime"
    paths = [runtime / "active.json", *(runtime / "orchestrators").glob("*.json"),
             *(state_root / "workspaces").glob("*/workspace.json")]
    found: list[tuple[str, int]] = []
    for path in paths:
        try:
            found.append((str(path), path.stat().st_mtime_ns))
        except OSError:
            continue
    return tuple(sorted(found))


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "goondan-studio"
    timeout = 60  # an idle keep-alive connection is closed after a minute
    server: _HTTPServer

    def log_message(self, format: str, *args: Any) -> None:
        pass  # request lines may carry ?token=; nothing is logged

    # -- entry points ---------------------------------------------------------------------------
    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_HEAD(self) -> None:
        self._dispatch("HEAD")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def _dispatch(self, method: str) -> None:
        studio = self.server.studio
        url = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        try:
            self._check_host()
            if url.path.startswith("/api/") or url.path == "/api":
                self._check_token(query)
                studio.refresh_secrets()
                parts = [unquote(p) for p in url.path.split("/")[2:]]
                self._api(method, parts, query)
            elif method == "POST":
                raise data.ApiError(405, "E_STUDIO_BAD_REQUEST", "only /api accepts POST")
            elif url.path.startswith("/static/"):
                self._static(studio.static_dir, unquote(url.path[len("/static/"):]), method)
            else:
                self._page(studio.static_dir, method)
        except data.ApiError as err:
            if method == "POST":  # its body may be unread: never parse it as the next request
                self.close_connection = True
            self._json(err.status, err.to_dict())
        except GoondanError as err:  # E_STORE_UNAVAILABLE: the database is down (503)
            status = 503 if err.code == "E_STORE_UNAVAILABLE" else 500
            self._json(status, data.ApiError(status, err.code, err.message).to_dict())
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as exc:  # a bug: answer 500 and say so on stderr (masked), keep serving
            import sys

            from goondan.secrets import mask

            print(mask(f"studio: {method} {url.path}: {type(exc).__name__}: {exc}"),
                  file=sys.stderr)
            self._json(500, data.ApiError(500, "E_INTERNAL",
                                          f"internal error ({type(exc).__name__})").to_dict())

    # -- checks ---------------------------------------------------------------------------------
    def _check_host(self) -> None:
        if not self.server.studio.loopback:
            return  # the token guards a public address
        host = (self.headers.get("Host") or "").strip()
        name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
        if not name or not is_loopback(name):
            raise data.ApiError(403, "E_STUDIO_FORBIDDEN",
                                "the studio answers only requests for a loopback host name")

    def _check_token(self, query: dict[str, str]) -> None:
        token = self.server.studio.token
        if token is None:
            return
        given = query.get("token", "")
        auth = self.headers.get("Authorization") or ""
        if auth.startswith("Bearer "):
            given = auth[len("Bearer "):].strip()
        if not hmac.compare_digest(given.encode(), token.encode()):
            raise data.ApiError(401, "E_STUDIO_UNAUTHORIZED",
                                "this studio needs its token (Authorization: Bearer T or ?token=T)")

    # -- API ------------------------------------------------------------------------------------
    def _api(self, method: str, parts: list[str], query: dict[str, str]) -> None:
        root = self.server.studio.state_root
        if self.server.studio.backend is not None:
            self._store_api(method, parts, query)
            return
        if method == "POST":
            if len(parts) == 2 and parts[0] == "approvals":
                self._json(200, self._decide(parts[1]))
                return
            raise data.ApiError(404, "E_STUDIO_NOT_FOUND", f"no POST {urlsplit(self.path).path}")
        match parts:
            case ["overview"]:
                self._json(200, data.overview(root))
            case ["stream"]:
                studio = self.server.studio

                def build() -> JsonObject:
                    studio.refresh_secrets()
                    return data.overview(root)

                poll = live.overview_events(build)
                self._stream(live.stream(poll, self.server.studio.stopping, alive=self._alive,
                                         interval=live.OVERVIEW_POLL_S))
            case ["conversations", workspace, agent, key]:
                self._json(200, data.conversation(
                    root, workspace, agent, key, q=query.get("q") or None,
                    offset=_int(query, "offset", 0), limit=_int(query, "limit", None)))
            case ["conversations", workspace, agent, key, "stream"]:
                info = data.find_instance(root, workspace, agent, key)
                try:
                    follower = live.ConversationFollower(info, query.get("cursor") or None)
                except ValueError:
                    raise data.ApiError(400, "E_STUDIO_BAD_REQUEST",
                                        "cursor is not one the conversation answered") from None
                self._stream(live.stream(follower.poll, self.server.studio.stopping,
                                         alive=self._alive))
            case ["traces"]:
                self._json(200, data.trace_list(root, limit=_int(query, "limit", 100) or 100))
            case ["traces", trace_id]:
                self._json(200, data.trace_doc(root, trace_id))
            case ["approvals"]:
                self._json(200, data.approval_list(root, status=query.get("status") or None))
            case _:
                raise data.ApiError(404, "E_STUDIO_NOT_FOUND",
                                    f"no API path {urlsplit(self.path).path}")

    def _store_api(self, method: str, parts: list[str], query: dict[str, str]) -> None:
        """The API over a PostgreSQL store (:mod:`goondan.studio.store`)."""
        from goondan.studio import store

        studio = self.server.studio
        root, backend = studio.state_root, studio.backend
        if method == "POST":
            if len(parts) == 2 and parts[0] == "approvals":
                approve, reason = self._decision()
                self._json(200, store.decide(root, backend, parts[1], approve=approve,
                                             reason=reason))
                return
            raise data.ApiError(404, "E_STUDIO_NOT_FOUND", f"no POST {urlsplit(self.path).path}")
        match parts:
            case ["overview"]:
                self._json(200, store.overview(root, backend, studio.store or ""))
            case ["stream"]:
                def build() -> JsonObject:
                    studio.refresh_secrets()
                    return store.overview(root, backend, studio.store or "")

                self._stream(live.stream(live.overview_events(build), studio.stopping,
                                         alive=self._alive, interval=live.OVERVIEW_POLL_S))
            case ["conversations", workspace, agent, key]:
                self._json(200, store.conversation(
                    backend, workspace, agent, key, q=query.get("q") or None,
                    offset=_int(query, "offset", 0), limit=_int(query, "limit", None)))
            case ["conversations", workspace, agent, key, "stream"]:
                try:
                    follower = store.StoreFollower(backend, workspace, agent, key,
                                                   query.get("cursor") or None)
                except ValueError:
                    raise data.ApiError(400, "E_STUDIO_BAD_REQUEST",
                                        "cursor is not one the conversation answered") from None
                self._stream(live.stream(follower.poll, studio.stopping, alive=self._alive,
                                         interval=store.POLL_S))
            case ["traces"]:
                self._json(200, store.trace_list(root, backend,
                                                 _int(query, "limit", 100) or 100))
            case ["traces", trace_id]:
                self._json(200, store.trace_doc(root, backend, trace_id))
            case ["approvals"]:
                self._json(200, store.approval_list(root, backend,
                                                    status=query.get("status") or None))
            case _:
                raise data.ApiError(404, "E_STUDIO_NOT_FOUND",
                                    f"no API path {urlsplit(self.path).path}")

    def _decide(self, approval_id: str) -> JsonObject:
        approve, reason = self._decision()
        return data.decide(self.server.studio.state_root, approval_id, approve=approve,
                           reason=reason)

    def _decision(self) -> tuple[bool, str | None]:
        """The checked body of a decision: ``(approve, reason)``."""
        kind = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
        if kind != "application/json":
            raise data.ApiError(415, "E_STUDIO_BAD_REQUEST",
                                "send the decision as Content-Type: application/json")
        origin = self.headers.get("Origin")
        if origin and urlsplit(origin).netloc != (self.headers.get("Host") or ""):
            raise data.ApiError(403, "E_STUDIO_FORBIDDEN", "a decision from another origin")
        length = int(self.headers.get("Content-Length") or 0)
        if length <= 0 or length > _MAX_BODY:
            raise data.ApiError(400, "E_STUDIO_BAD_REQUEST", "a JSON body is required")
        try:
            body = json.loads(self.rfile.read(length))
        except ValueError:
            raise data.ApiError(400, "E_STUDIO_BAD_REQUEST", "the body is not JSON") from None
        decision = body.get("decision") if isinstance(body, dict) else None
        reason = body.get("reason") if isinstance(body, dict) else None
        if decision not in ("approve", "deny") or not isinstance(reason, str | None):
            raise data.ApiError(400, "E_STUDIO_BAD_REQUEST",
                                'expected {"decision": "approve"|"deny", "reason": str?}')
        return decision == "approve", reason or None

    # -- answers --------------------------------------------------------------------------------
    def _json(self, status: int, doc: JsonObject) -> None:
        body = json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode()
        self._send(status, body, "application/json; charset=utf-8")

    def _send(self, status: int, body: bytes, content_type: str, *,
              extra: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Referrer-Policy", "no-referrer")
        for key, value in (extra or {}).items():
            self.send_header(key, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _static(self, directory: Path, name: str, method: str) -> None:
        base = directory.resolve()
        path = (base / name).resolve()
        if not name or not path.is_relative_to(base) or not path.is_file():
            raise data.ApiError(404, "E_STUDIO_NOT_FOUND", f"no file {name!r}")
        kind = _TYPES.get(path.suffix) or mimetypes.guess_type(path.name)[0]
        self._send(200, path.read_bytes(), (kind or "application/octet-stream")
                   + ("; charset=utf-8" if kind and kind.startswith("text/") else ""))

    def _page(self, directory: Path, method: str) -> None:
        index = directory / "index.html"
        body = index.read_bytes() if index.is_file() else _MISSING_PAGE
        self._send(200, body, "text/html; charset=utf-8",
                   extra={"Content-Security-Policy": _PAGE_CSP})

    def _stream(self, chunks: Iterator[bytes]) -> None:
        self.close_connection = True
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Accel-Buffering", "no")
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.flush()
        for chunk in chunks:
            self.wfile.write(chunk)
            self.wfile.flush()

    def _alive(self) -> bool:
        """False once the client closed its end (an EOF is readable): the stream stops."""
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            return not readable or self.connection.recv(1, socket.MSG_PEEK) != b""
        except (OSError, ValueError):
            return False


def _int(query: dict[str, str], key: str, default: int | None) -> Any:
    raw = query.get(key)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0:
        raise data.ApiError(400, "E_STUDIO_BAD_REQUEST", f"{key} must be a whole number >= 0")
    return value
