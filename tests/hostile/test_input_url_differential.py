"""Hostile input, issue 27 item 1: the ``http-fetch`` host policy checked one host and urllib3
connected to another.

Repro: the policy read the host with ``urllib.parse`` and urllib3 with its own parser, which
stops the authority at a backslash: ``http://127.0.0.1:18111\\@api.example.com/../secret``
passed ``allowHosts: [api.example.com]`` and fetched ``127.0.0.1:18111/secret``; the same trick
passed ``denyHosts`` and the default metadata block, through a redirect too. A name was also
resolved twice (check, then connect), and a name resolving to loopback was allowed.

Every test here runs against a fake DNS (``socket.getaddrinfo`` answers from a table; numeric
hosts go to the real resolver, numerically) and a connect recorder on urllib3's own
``create_connection``: it lets 127.0.0.1 through to the loopback server and refuses (and
records) every other address, so no packet leaves the machine while the tests still see where
urllib3 *would* have connected.
"""

from __future__ import annotations

import contextlib
import ipaddress
import shutil
import socket
import ssl
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any, ClassVar
from unittest import mock
from urllib.parse import urljoin, urlsplit

import pytest
import urllib3.util.connection
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from urllib3.exceptions import LocationParseError
from urllib3.util import parse_url

from goondan.tools import ToolContext, ToolFailure, load_entry_module
from tests.support.aio import run
from tests.support.loopback import loopback_server

TOOLS = (
    Path(__file__).resolve().parents[2]
    / "goondan"
    / "builtin_packages"
    / "@goondan"
    / "base"
    / "tools"
)
http = load_entry_module(TOOLS / "http_fetch.py").handlers

PUBLIC_V4 = "93.184.216.34"          # never contacted: the recorder refuses it
PUBLIC_V6 = "2606:2800:220:1:248:1893:25c8:1946"
DNS = {
    "api.example.com": [PUBLIC_V4, PUBLIC_V6],
    "example.test": [PUBLIC_V4],
    "rebind.test": ["127.0.0.1"],          # a public-looking name that answers loopback
    "meta.test": ["169.254.169.254"],
    "lan.test": ["10.0.0.7"],
    "mixed.test": [PUBLIC_V4, "127.0.0.1"],
    "localhost": ["127.0.0.1"],
}
_real_getaddrinfo = socket.getaddrinfo
_real_connect = urllib3.util.connection.create_connection


class Network:
    """The fake DNS answers and the connect attempts urllib3 made."""

    def __init__(self, dns: dict[str, list[str]], open_port: int | None) -> None:
        self.dns = dns
        self.open_port = open_port
        self.lookups: dict[str, int] = {}
        self.connects: list[tuple[str, int]] = []
        self.lock = threading.Lock()

    def getaddrinfo(self, host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        name = str(host).lower().rstrip(".")
        if name in self.dns:
            with self.lock:
                self.lookups[name] = self.lookups.get(name, 0) + 1
            return [(socket.AF_INET6 if ":" in a else socket.AF_INET, socket.SOCK_STREAM, 6, "",
                     (a, int(port or 0))) for a in self.dns[name]]
        # Numeric hosts only (inet_aton forms included): no query ever leaves the machine.
        return _real_getaddrinfo(
            host, port, socket.AF_UNSPEC, socket.SOCK_STREAM, 0, socket.AI_NUMERICHOST
        )

    def create_connection(
        self, address: tuple[str, int], *args: Any, **kwargs: Any
    ) -> socket.socket:
        host, port = address
        with self.lock:
            self.connects.append((str(host).strip("[]"), int(port)))
        if (host, port) != ("127.0.0.1", self.open_port):
            raise ConnectionRefusedError(111, "refused by the test's connect recorder")
        return _real_connect(address, *args, **kwargs)


@contextmanager
def network(
    dns: dict[str, list[str]] | None = None, open_port: int | None = None
) -> Iterator[Network]:
    """Fake DNS and the connect recorder; only 127.0.0.1:``open_port`` is really connected to."""
    net = Network(DNS if dns is None else dns, open_port)
    with mock.patch.object(socket, "getaddrinfo", net.getaddrinfo), \
            mock.patch.object(urllib3.util.connection, "create_connection", net.create_connection):
        yield net


class Recorder(BaseHTTPRequestHandler):
    """Records each request's path and Host header; ``/hop?to=<location>`` redirects."""

    protocol_version = "HTTP/1.1"
    seen: ClassVar[list[tuple[str, str]]] = []
    location = ""

    def do_GET(self) -> None:
        Recorder.seen.append((self.path, self.headers.get("Host", "")))
        if self.path.startswith("/hop"):
            self.send_response(302)
            self.send_header("Location", Recorder.location)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def port() -> Iterator[int]:
    with loopback_server(Recorder) as server:
        yield int(server.server_address[1])


@pytest.fixture(autouse=True)
def _fresh_recorder() -> None:
    Recorder.seen.clear()


def fetch(url: str, **config: Any) -> dict[str, Any] | ToolFailure:
    context = ToolContext(
        "agent", "key", "turn-1", "0" * 32, "call-1", None, Path.cwd(), config=config
    )
    try:
        result: dict[str, Any] = run(http["get"](context, {"url": url, "timeoutMs": 5000}))
    except ToolFailure as exc:
        return exc
    return result


def refused(outcome: dict[str, Any] | ToolFailure) -> bool:
    """The tool refused the URL (the policy, or the input check for a URL it cannot parse)."""
    return isinstance(outcome, ToolFailure) and outcome.code in (
        "E_BASE_HTTP_DENIED",
        "E_TOOL_INVALID_ARGS",
    )


# -- the reported bypasses ------------------------------------------------------------------------

def test_a_backslash_does_not_carry_a_loopback_fetch_past_allow_hosts(port: int) -> None:
    with network(open_port=port) as net:
        outcome = fetch(
            f"http://127.0.0.1:{port}\\@api.example.com/../secret", allowHosts=["api.example.com"]
        )
    assert refused(outcome), outcome
    assert Recorder.seen == [] and net.connects == []


def test_a_backslash_does_not_carry_a_fetch_past_deny_hosts(port: int) -> None:
    with network(open_port=port) as net:
        outcome = fetch(f"http://127.0.0.1:{port}\\@example.test/secret",
                        allowPrivate=True, denyHosts=["127.0.0.0/8"])
    assert refused(outcome), outcome
    assert Recorder.seen == [] and net.connects == []


@pytest.mark.parametrize("url", [
    "http://169.254.169.254\\@example.test/latest/meta-data/",
    "http://169.254.169.254:80\\@example.test/",
    "http://[fe80::1]\\@example.test/",
])
def test_a_backslash_does_not_reach_a_metadata_address(url: str) -> None:
    with network() as net:
        outcome = fetch(url)
    assert refused(outcome), outcome
    assert net.connects == []


def test_a_redirect_with_a_backslash_does_not_reach_a_metadata_address(port: int) -> None:
    Recorder.location = "http://169.254.169.254\\@example.test/latest/meta-data/"
    with network(open_port=port) as net:
        outcome = fetch(f"http://127.0.0.1:{port}/hop", allowPrivate=True)
    assert refused(outcome), outcome
    assert net.connects == [("127.0.0.1", port)]   # the first hop only


@pytest.mark.parametrize("host", ["rebind.test", "localhost", "lan.test", "meta.test"])
def test_a_name_resolving_to_a_non_public_address_is_refused_by_default(
    port: int, host: str
) -> None:
    with network(open_port=port) as net:
        outcome = fetch(f"http://{host}:{port}/secret")
    assert refused(outcome), outcome
    assert Recorder.seen == [] and net.connects == []


def test_the_name_is_resolved_once_and_the_checked_address_is_contacted(port: int) -> None:
    """A DNS answer that changes after the check (rebinding) is never asked for."""
    answers = iter([["127.0.0.1"]] + [["169.254.169.254"]] * 10)

    class Rebinding(dict[str, list[str]]):
        def __contains__(self, name: object) -> bool:
            return name == "rebind.test"

        def __getitem__(self, name: str) -> list[str]:
            return next(answers)

    with network(Rebinding(), open_port=port) as net:
        outcome = fetch(f"http://rebind.test:{port}/page", allowHosts=["rebind.test"])
    assert not isinstance(outcome, ToolFailure), outcome
    assert outcome["status"] == 200 and net.lookups == {"rebind.test": 1}
    assert set(net.connects) <= {("127.0.0.1", port)}   # a kept-alive connection records nothing
    assert Recorder.seen == [("/page", f"rebind.test:{port}")]   # the name in the Host header


def test_only_the_addresses_that_pass_are_contacted(port: int) -> None:
    with network(open_port=port) as net:
        outcome = fetch(f"http://mixed.test:{port}/")
    # the public one refused
    assert isinstance(outcome, ToolFailure) and outcome.code == "E_BASE_HTTP"
    assert net.connects == [(PUBLIC_V4, port)]


def test_a_refused_connection_moves_on_to_the_next_checked_address(port: int) -> None:
    with network(open_port=port) as net:
        outcome = fetch(f"http://mixed.test:{port}/next", allowPrivate=True)
    assert not isinstance(outcome, ToolFailure), outcome
    # The public address was tried first and refused; the request then reached the server (on
    # a new connection, or one kept alive from an earlier test: both are to the checked address).
    assert net.connects[0] == (PUBLIC_V4, port) and set(net.connects[1:]) <= {("127.0.0.1", port)}
    assert Recorder.seen == [("/next", f"mixed.test:{port}")]


def test_loopback_opens_with_allow_private_or_an_explicit_allow_hosts_entry(port: int) -> None:
    with network(open_port=port):
        for config in (
            {"allowPrivate": True},
            {"allowHosts": ["127.0.0.1"]},
            {"allowHosts": ["localhost"]},
            {"allowHosts": ["127.0.0.0/8"]},
        ):
            outcome = fetch(f"http://localhost:{port}/x", **config)
            assert not isinstance(outcome, ToolFailure), (config, outcome)
        # Wildcards select among public hosts; they never open a default denial.
        assert refused(fetch(f"http://localhost:{port}/x", allowHosts=["local*"]))
        # allowPrivate never opens link-local / metadata addresses.
        assert refused(fetch(f"http://meta.test:{port}/x", allowPrivate=True))
    assert [path for path, _ in Recorder.seen] == ["/x"] * 4


# -- the differential: the policy's host is the host urllib3 connects to --------------------------

POLICIES: list[dict[str, Any]] = [
    {},
    {"allowHosts": ["api.example.com"]},
    {"allowPrivate": True, "denyHosts": ["127.0.0.0/8", "localhost"]},
    {"allowHosts": ["127.0.0.1"]},
]


def _addresses(host: str) -> set[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    """Where the fake DNS sends ``host`` (an address literal is itself)."""
    host = host.strip("[]").lower().rstrip(".")
    if host in DNS:
        return set(map(ipaddress.ip_address, DNS[host]))
    try:
        infos = _real_getaddrinfo(
            host, 80, socket.AF_UNSPEC, socket.SOCK_STREAM, 0, socket.AI_NUMERICHOST
        )
    except (OSError, UnicodeError):
        return set()
    return {ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos}


def _plain(address: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    ip = ipaddress.ip_address(address)
    mapped = getattr(ip, "ipv4_mapped", None)
    return mapped if mapped is not None else ip


METADATA = {"169.254.169.254", "100.100.100.200", "fd00:ec2::254"}


def _allowed(policy: dict[str, Any], host: str, address: str) -> bool:
    """An independent statement of what each test policy lets through."""
    ip = _plain(address)
    public = str(ip) in (PUBLIC_V4, PUBLIC_V6)
    if policy == {}:
        return public
    if policy == {"allowHosts": ["api.example.com"]}:
        return host == "api.example.com" and public
    if policy == {"allowPrivate": True, "denyHosts": ["127.0.0.0/8", "localhost"]}:
        return host != "localhost" and ip not in ipaddress.ip_network("127.0.0.0/8") and \
            not ip.is_link_local and str(ip) not in METADATA and not host.startswith("metadata")
    if policy == {"allowPrivate": True}:
        return not ip.is_link_local and str(ip) not in METADATA and not host.startswith("metadata")
    assert policy == {"allowHosts": ["127.0.0.1"]}, policy
    return str(ip) == "127.0.0.1"


def assert_connects_where_checked(url: str, policy: dict[str, Any], attempts: list[tuple[str, int]],
                                  outcome: dict[str, Any] | ToolFailure) -> None:
    """Refused without a connection, or every connection went where urllib3 itself would have gone
    for ``url`` (its parse of the URL, resolved), the standard library agreed on that host, and the
    policy allows that host and address."""
    if refused(outcome) or not attempts:
        assert attempts == [], (url, policy, attempts)   # refused before any connection
        return
    url = url.strip()  # as the tool reads its input
    parsed = parse_url(url)
    host = (parsed.host or "").strip("[]").lower().rstrip(".")
    port = parsed.port or (443 if (parsed.scheme or "").lower() == "https" else 80)
    stdlib_host = (urlsplit(url).hostname or "").rstrip(".")
    assert stdlib_host == host or not stdlib_host.isascii(), (url, stdlib_host, host)
    for address, connected_port in attempts:
        assert connected_port == port, (url, attempts)
        assert ipaddress.ip_address(address) in _addresses(host), (url, host, attempts)
        assert _allowed(policy, host, address), (url, policy, attempts)


SHAPES = [
    "http://127.0.0.1:18111\\@api.example.com/../secret",
    "http://api.example.com\\@127.0.0.1/", "http://api.example.com%5c@127.0.0.1/",
    "http://api.example.com@127.0.0.1/", "http://127.0.0.1@api.example.com/",
    "http://127.0.0.1#@api.example.com/", "http://127.0.0.1?@api.example.com/",
    "http://127.0.0.1/\\@api.example.com/", "http://127.0.0.1%2f@api.example.com/",
    "http://127.0.0.1%23@api.example.com/", "http://a@b@api.example.com/",
    "http://api.example.com:80\\@169.254.169.254/", "http://169.254.169.254\\.api.example.com/",
    "http://2130706433/", "http://0x7f.1/", "http://0177.0.0.1/", "http://127.1/", "http://127.000.000.001/",
    "http://0x7f000001/", "http://0/", "http://0.0.0.0/", "http://[::]/", "http://[::1]/",
    "http://[::ffff:127.0.0.1]/", "http://[::ffff:7f00:1]/", "http://[::ffff:169.254.169.254]/",
    "http://[0:0:0:0:0:ffff:127.0.0.1]/", "http://[::127.0.0.1]/", "http://[64:ff9b::7f00:1]/",
    "http://[2002:7f00:1::]/", "http://[fe80::1%25eth0]/", "http://[fe80::1%eth0]/",
    "http://localhost/", "http://localhost./", "http://LOCALHOST/", "http://%6c%6fcalhost/",
    "http://localhost%00.api.example.com/", "http://api.example.com./", "http://API.EXAMPLE.COM/",
    "http://api.example.com../", "http://api.example.com:/", "http://api.example.com:0080/",
    "http://api.example.com:65536/", "http://api.example.com: 80/", "http://api.example.com:+80/",
    "http://api.example.com:８０/", "http://ａｐｉ.example.com/", "http://api。example。com/",
    "http://１２７.０.０.１/", "http://xn--80ak6aa92e.com/", "http://bücher.example/",
    "http://api.example.com\t.evil/", "http://api.example.com\n@127.0.0.1/", " http://127.0.0.1/",
    "http://rebind.test/", "http://meta.test/", "http://lan.test/", "http://mixed.test/",
    "http://metadata.google.internal/", "http://metadata/", "http://METADATA.GOOGLE.INTERNAL./",
    "https://api.example.com\\@127.0.0.1:443/", "HTTP://api.example.com/", "hTtPs://127.0.0.1/",
    "http:///127.0.0.1/", "http:/127.0.0.1/", "http:\\\\127.0.0.1\\", "http://[127.0.0.1]/",
    "http://[::1]:80@api.example.com/", "http://api.example.com:80:80/", "http://[::1/",
    "http://127.0.0.1:80\\@api.example.com:80/", "http://api.example.com/\\..\\127.0.0.1",
    "http://169.254.169.254.nip.io/", "http://100.100.100.200/", "http://[fd00:ec2::254]/",
    "http://10.0.0.7/", "http://192.168.1.1/", "http://172.16.0.1/", "http://100.64.0.1/",
    "http://224.0.0.1/", "http://255.255.255.255/", f"http://{PUBLIC_V4}/", f"http://[{PUBLIC_V6}]/",
]


@pytest.mark.parametrize(
    "policy", POLICIES, ids=["default", "allow-name", "deny-loopback", "allow-loopback"]
)
def test_url_shapes_connect_only_where_the_policy_checked(policy: dict[str, Any]) -> None:
    passed = []
    for url in SHAPES:
        with network() as net:
            outcome = fetch(url, **policy)
        assert_connects_where_checked(url, policy, net.connects, outcome)
        passed.extend(net.connects)
    # The differential is not vacuous: some shapes do get through to a (recorded) connect.
    assert passed


_HOSTS = [
    "api.example.com",
    "API.Example.com.",
    "127.0.0.1",
    "169.254.169.254",
    "[::1]",
    "[::ffff:127.0.0.1]",
    "[::ffff:169.254.169.254]",
    "2130706433",
    "0x7f.1",
    "127.1",
    "localhost",
    "localhost.",
    "rebind.test",
    "meta.test",
    "mixed.test",
    "metadata.google.internal",
    "ａｐｉ.example.com",
    "%6c%6fcalhost",
    "[fe80::1%25eth0]",
    PUBLIC_V4,
    f"[{PUBLIC_V6}]",
    "10.0.0.7",
    "0.0.0.0",
    "bücher.example",
]
_GLUE = [
    "\\",
    "/",
    "@",
    ":",
    "#",
    "?",
    "%",
    "%5c",
    "%2f",
    "%40",
    ".",
    "..",
    "[",
    "]",
    "\t",
    " ",
    "",
    ":80",
    ":18111",
    ":0",
    ":99999",
    "%00",
    "\u3002",
    "user:pw@",
    "./",
    "/../",
]
_SCHEMES = ["http://"] * 4 + ["https://"] * 2 + ["HTTP://", "http:\\\\", "http:/", "http:///"]
_PORTS = ["", "", ":80", ":8080", ":", ":0", ":99999", ":0x50"]


@st.composite
def urls(draw: st.DrawFn) -> str:
    """URL-shaped strings: a scheme, confusable bits, a host and port, more confusable bits."""
    pieces = st.sampled_from(_HOSTS + _GLUE)
    parts = [draw(st.sampled_from(_SCHEMES))]
    parts += draw(st.lists(pieces, max_size=2))
    parts += [draw(st.sampled_from(_HOSTS)), draw(st.sampled_from(_PORTS))]
    parts += draw(st.lists(pieces, max_size=3))
    parts.append(draw(st.sampled_from(["", "/", "/../secret", "/x?y=1", "#f"])))
    return "".join(parts)


@pytest.mark.slow
@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(url=urls(), policy=st.sampled_from(POLICIES))
def test_fuzzed_url_shapes_connect_only_where_the_policy_checked(
    url: str, policy: dict[str, Any]
) -> None:
    with network() as net:
        outcome = fetch(url, **policy)
    assert_connects_where_checked(url, policy, net.connects, outcome)


@pytest.mark.slow
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.function_scoped_fixture])
@given(location=urls().filter(lambda u: u.isascii() and "\n" not in u and "\r" not in u),
       policy=st.sampled_from([{"allowHosts": ["127.0.0.1"]}, {"allowPrivate": True}]))
def test_fuzzed_redirect_targets_are_checked_hop_by_hop(
    port: int, location: str, policy: dict[str, Any]
) -> None:
    """The same property for a ``Location`` header, after the allowed first hop."""
    Recorder.location = location
    Recorder.seen.clear()
    with network(open_port=port) as net:
        outcome = fetch(f"http://127.0.0.1:{port}/hop", **policy)
    assert Recorder.seen[:1] == [("/hop", f"127.0.0.1:{port}")]   # the first hop was sent
    # The first hop's connection (new or kept alive from an earlier example) is allowed; every
    # other connection must be where the Location header leads, and allowed.
    later = [attempt for attempt in net.connects if attempt != ("127.0.0.1", port)]
    try:
        joined = urljoin(f"http://127.0.0.1:{port}/hop", location)
        parse_url(joined)
    except (LocationParseError, ValueError):
        assert later == [] or refused(outcome)
        return
    assert_connects_where_checked(joined, policy, later, outcome)


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl is not installed")
def test_https_to_the_checked_address_sends_the_name_in_sni_and_verifies_it(tmp_path: Path) -> None:
    """Pinning the address keeps TLS about the name: SNI carries it and the certificate is still
    verified (this self-signed one is rejected)."""
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
                    "-out", str(cert), "-subj", "/CN=rebind.test", "-days", "1"],
                   check=True, capture_output=True)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    names: list[str | None] = []

    def record(_sock: ssl.SSLObject, name: str, _context: ssl.SSLContext) -> None:
        names.append(name)

    context.sni_callback = record
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve() -> None:
        conn, _ = listener.accept()
        with conn, contextlib.suppress(OSError):
            context.wrap_socket(conn, server_side=True).close()

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    try:
        with network(open_port=port) as net:
            outcome = fetch(f"https://rebind.test:{port}/", allowHosts=["rebind.test"])
    finally:
        server.join(10)
        listener.close()
    assert isinstance(outcome, ToolFailure) and outcome.code == "E_BASE_HTTP", outcome
    assert "certificate" in outcome.message.lower()
    assert net.connects == [("127.0.0.1", port)] and names == ["rebind.test"]
