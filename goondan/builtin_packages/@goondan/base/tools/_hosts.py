"""The host policy of ``http-fetch`` (docs/base-package.md, "http-fetch host policy").

Before every request — the first and each redirect target — :meth:`HostPolicy.target` turns
the URL into the :class:`Target` the request is then built from, so the host that is checked
is the host that is contacted:

* the URL is parsed by urllib3's own parser (the one its pool manager would use) and refused
  when the standard library parses a different host or port out of it, or when it has
  userinfo (``user@``), a backslash, whitespace or control characters, a percent sign in the
  host, or a non-canonical IPv4 form (``2130706433``, ``0x7f.1``, ``127.1``);
* the host is resolved once; the request connects to the checked addresses only (never
  resolving the name again), sending the name in the ``Host`` header and TLS SNI;
* each resolved address is judged on its own: a ``denyHosts`` match refuses it, a non-empty
  ``allowHosts`` must match, and the default denials apply unless ``allowHosts`` names the
  host or address explicitly (an exact name, an address or a network — a wildcard pattern is
  not explicit enough): link-local and cloud metadata addresses (:data:`DEFAULT_DENIED_NETWORKS`,
  :data:`DEFAULT_DENIED_NAMES`) always, every other non-public address (loopback, private,
  shared, unspecified, multicast, reserved) unless the Tool config says ``allowPrivate: true``.
  An IPv4 address inside an IPv6 one (``::ffff:127.0.0.1``, NAT64, 6to4, Teredo) is judged too.
"""

from __future__ import annotations

import fnmatch
import ipaddress
import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from goondan.http.pool import LocationParseError, parse_url  # urllib3's own URL parser
from goondan.tools import ToolFailure

__all__ = [
    "DEFAULT_DENIED_NAMES",
    "DEFAULT_DENIED_NETWORKS",
    "HostPolicy",
    "Target",
    "parse_strictly",
]

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address

DEFAULT_DENIED_NETWORKS: tuple[Network, ...] = tuple(
    ipaddress.ip_network(n) for n in (
        "169.254.0.0/16",      # IPv4 link-local: AWS/GCP/Azure/OpenStack metadata 169.254.169.254
        "fe80::/10",           # IPv6 link-local
        "fd00:ec2::254/128",   # AWS IMDS over IPv6
        "100.100.100.200/32",  # Alibaba Cloud metadata
    )
)
DEFAULT_DENIED_NAMES = ("metadata", "metadata.google.internal", "metadata.goog")
_DEFAULT_PORTS = {"http": 80, "https": 443}
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_IPV4_COMPATIBLE = ipaddress.ip_network("::/96")


@dataclass(frozen=True)
class Target:
    """Where one request goes: the checked addresses and what to send them.

    ``host`` is the name as urllib3 parses it (lower case, IDNA-encoded, IPv6 without
    brackets, no trailing dot); ``addresses`` are the resolved addresses that passed the policy,
    in resolver order — the request connects to these and to nothing else."""

    url: str
    scheme: str
    host: str
    port: int
    request_uri: str
    addresses: tuple[Address, ...]

    @property
    def is_literal(self) -> bool:
        """The URL names an IP address, not a host name."""
        return _literal(self.host) is not None

    @property
    def host_header(self) -> str:
        """The ``Host`` header: the host, with the port unless it is the scheme's default."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port == _DEFAULT_PORTS[self.scheme] else f"{host}:{self.port}"


def _entries(config: Mapping[str, Any], key: str) -> tuple[str, ...]:
    value = config.get(key)
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list | tuple):
        return ()
    return tuple(str(v).strip().lower().rstrip(".") for v in value if str(v).strip())


def _network(entry: str) -> Network | None:
    try:
        return ipaddress.ip_network(entry.strip("[]"), strict=False)
    except ValueError:
        return None


def _literal(host: str) -> Address | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def _embedded(address: Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address carries (mapped, compatible, NAT64, 6to4, Teredo)."""
    if not isinstance(address, ipaddress.IPv6Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address in _NAT64 or address in _IPV4_COMPATIBLE:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    if address.sixtofour is not None:
        return address.sixtofour
    return address.teredo[1] if address.teredo is not None else None


def _same(address: Address) -> list[Address]:
    """``address`` and, for an IPv4-mapped IPv6 address, the IPv4 address it is."""
    mapped = address.ipv4_mapped if isinstance(address, ipaddress.IPv6Address) else None
    return [address] if mapped is None else [address, mapped]


def _default_denial(address: Address) -> str | None:
    """``"metadata"`` for link-local and metadata addresses, ``"private"`` for any other
    non-public address, ``None`` for a public one."""
    forms = [a for a in (address, _embedded(address)) if a is not None]
    if any(a.is_link_local or any(a in n for n in DEFAULT_DENIED_NETWORKS) for a in forms):
        return "metadata"
    if any(not a.is_global or a.is_multicast for a in forms):
        return "private"
    return None


def _is_pattern(entry: str) -> bool:
    return any(c in entry for c in "*?[")


@dataclass(frozen=True)
class HostPolicy:
    """``allowHosts`` / ``denyHosts`` / ``allowPrivate`` of the Tool config plus the default
    denials."""

    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()
    allow_private: bool = False

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> HostPolicy:
        """The policy of a Tool ``config`` mapping (invalid entries are ignored)."""
        if not hasattr(config, "get"):
            return cls()
        return cls(allow=_entries(config, "allowHosts"), deny=_entries(config, "denyHosts"),
                   allow_private=config.get("allowPrivate") is True)

    def target(self, url: str) -> Target:
        """The checked :class:`Target` of ``url``; ``E_BASE_HTTP_DENIED`` when it may not be
        contacted, ``E_BASE_HTTP`` when its host does not resolve."""
        scheme, host, port, request_uri = parse_strictly(url)
        if host in DEFAULT_DENIED_NAMES and not self._names(host):
            raise _denied(url, "it is a cloud metadata host")  # no DNS query for these
        denied = self._match(self.deny, host, ())
        if denied is not None:
            raise _denied(url, f"it matches denyHosts entry {denied!r}")
        passed: list[Address] = []
        reason = ""
        for address in _resolve(url, host, port):
            why = self._judge(host, address)
            if why is None:
                passed.append(address)
            elif not reason:
                reason = why
        if not passed:
            raise _denied(url, reason)
        return Target(url, scheme, host, port, request_uri, tuple(passed))

    @staticmethod
    def refusal(url: str, why: str) -> ToolFailure:
        """The ``E_BASE_HTTP_DENIED`` failure for ``url``."""
        return _denied(url, why)

    def _names(self, host: str) -> bool:
        """``allowHosts`` names ``host`` exactly (not through a wildcard pattern)."""
        return any(entry == host for entry in self.allow if not _is_pattern(entry))

    def _explicit(self, address: Address) -> bool:
        """An ``allowHosts`` address or network contains ``address``."""
        networks = [n for n in map(_network, self.allow) if n is not None]
        return any(a in n for n in networks for a in _same(address))

    @staticmethod
    def _match(entries: Iterable[str], host: str, forms: Iterable[Address]) -> str | None:
        forms = list(forms)
        for entry in entries:
            network = _network(entry)
            if network is None:
                if fnmatch.fnmatchcase(host, entry):
                    return entry
            elif any(a in network for a in forms):
                return entry
        return None

    def _judge(self, host: str, address: Address) -> str | None:
        """Why ``address`` (resolved from ``host``) is refused, or ``None``."""
        # Deny entries also catch an IPv4 address carried inside an IPv6 one; allow entries
        # only the address itself (an IPv4-mapped address is that IPv4 address).
        forms = [a for a in (address, _embedded(address)) if a is not None]
        denied = self._match(self.deny, host, forms)
        if denied is not None:
            return f"its address {address} matches denyHosts entry {denied!r}"
        if self.allow and self._match(self.allow, host, _same(address)) is None:
            return "it is not in allowHosts"
        if self._names(host) or self._explicit(address):
            return None
        kind = _default_denial(address)
        if kind == "metadata":
            return f"its address {address} is link-local or a cloud metadata address"
        if kind == "private" and not self.allow_private:
            return f"its address {address} is loopback, private or otherwise not public"
        return None


def parse_strictly(url: str) -> tuple[str, str, int, str]:
    """``(scheme, host, port, request_uri)`` as urllib3 parses ``url``, or a refusal when the
    URL is ambiguous: parsers disagree on it, or it has a shape they are known to disagree on."""
    if "\\" in url or any(c <= " " or c == "\x7f" for c in url):
        raise _denied(url, "the URL is ambiguous (a backslash, whitespace or control character)")
    try:
        parsed = parse_url(url)
        split = urlsplit(url)
        split_host, split_port = split.hostname or "", split.port
    except (LocationParseError, ValueError) as exc:
        raise _denied(url, f"the URL cannot be parsed ({exc})") from None
    scheme = (parsed.scheme or "").lower()
    if scheme not in _DEFAULT_PORTS or not parsed.host:
        raise _denied(url, "only absolute http:// and https:// URLs are allowed")
    if "@" in (split.netloc or "") or parsed.auth is not None:
        raise _denied(url, "the URL has userinfo (user@host); send credentials in a header instead")
    host = parsed.host.strip("[]").lower()
    if "%" in host or "%" in split_host:
        raise _denied(url, "the URL is ambiguous (a percent sign or zone id in the host)")
    if host != _idna(split_host) or parsed.port != split_port:
        raise _denied(url, "the URL is ambiguous (parsers disagree on its host or port)")
    host = host.rstrip(".")
    if _literal(host) is None and _is_numeric_ipv4(host):
        raise _denied(url, "the URL is ambiguous (a non-canonical IPv4 form; write a.b.c.d)")
    return scheme, host, parsed.port or _DEFAULT_PORTS[scheme], parsed.request_uri


def _idna(host: str) -> str:
    """``host`` the way urllib3 normalises it (IDNA for non-ASCII names); ``""`` if it cannot."""
    host = host.lower()
    if host.isascii():
        return host
    try:
        return parse_url(f"http://{host}/").host or ""
    except LocationParseError:
        return ""


def _is_numeric_ipv4(host: str) -> bool:
    """``host`` is an IPv4 address to ``inet_aton`` (``127.1``, ``0x7f.1``, ``2130706433``)."""
    try:
        socket.inet_aton(host)
    except (OSError, ValueError):
        return False
    return True


def _resolve(url: str, host: str, port: int) -> list[Address]:
    literal = _literal(host)
    if literal is not None:
        return [literal]
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise ToolFailure(
            f"request to {url} failed: cannot resolve {host!r} ({exc})",
            code="E_BASE_HTTP",
            suggestion="Check the URL and that the server is reachable.",
        ) from None
    out: list[Address] = []
    for info in infos:
        address = _literal(str(info[4][0]).split("%", 1)[0])
        if address is not None and address not in out:
            out.append(address)
    return out


def _denied(url: str, why: str) -> ToolFailure:
    return ToolFailure(
        f"request to {url} refused: {why or 'no address to connect to'}",
        code="E_BASE_HTTP_DENIED",
        suggestion="Loopback, private, link-local and cloud metadata addresses are refused by "
        "default; list the host or address in the Tool's config allowHosts (or set allowPrivate: "
        "true for loopback and private networks) if this request is intended.",
    )
