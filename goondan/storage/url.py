"""Where a deployment keeps its state: ``--store`` / ``GOONDAN_STORE`` (docs/storage.md).

* absent (or empty) → the JSONL state root, resolved as before (``--state-root``,
  ``GOONDAN_STATE_ROOT``, config.toml, ``~/.goondan``);
* a path → the JSONL state root at that path;
* ``postgresql://…`` (or ``postgres://…``) → the PostgreSQL store at that URL.

A URL may carry a password. It is never printed: :func:`mask_url` replaces the password (in
the user-info part and in a ``password=`` query parameter) with ``***``, and every message of
this module — and of the PostgreSQL store — goes through it. Parsing a URL also registers its
password with :mod:`goondan.secrets`, so log records and every error the CLI prints mask it
too. Pure standard library: parsing a URL never imports the database driver.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal
from urllib.parse import parse_qsl, unquote, urlsplit

from goondan.errors import ConfigError
from goondan.secrets import register_secret

__all__ = ["ENV_STORE", "STORE_URL", "StoreLocation", "mask_url", "parse_store", "redact"]

ENV_STORE = "GOONDAN_STORE"
STORE_URL = "E_STORE_URL"
POSTGRES_SCHEMES = ("postgresql", "postgres")
_ACCEPTED = "a state-root path or postgresql://USER:PASSWORD@HOST:PORT/DATABASE"

_USERINFO_PASSWORD = re.compile(r"(://[^:/?#@\s]*:)[^@\s]*@")
_QUERY_PASSWORD = re.compile(r"((?:^|[?&\s])password=)[^&\s]*", re.IGNORECASE)
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")


def mask_url(text: str) -> str:
    """``text`` with every URL password replaced by ``***`` (also in malformed URLs)."""
    return _QUERY_PASSWORD.sub(r"\1***", _USERINFO_PASSWORD.sub(r"\1***@", text))


def _password_of(url: str) -> str | None:
    try:
        parts = urlsplit(url)
        query = dict(parse_qsl(parts.query))
        return parts.password or query.get("password") or None
    except ValueError:
        return None


def redact(text: str, url: str | None) -> str:
    """``text`` (say a driver's error message) with ``url``'s password and any URL masked."""
    password = _password_of(url) if url else None
    if password:
        text = text.replace(password, "***")
    return mask_url(text)


@dataclass(frozen=True)
class StoreLocation:
    """A parsed ``--store``: ``kind`` is ``jsonl`` or ``postgres``.

    ``path`` is the JSONL state root given explicitly (``None``: resolve it as usual); ``url``
    is the PostgreSQL URL *with* its password — pass it to the driver, print :attr:`display`.
    """

    kind: Literal["jsonl", "postgres"]
    path: Path | None = None
    url: str | None = field(default=None, repr=False)

    @property
    def display(self) -> str:
        """What messages show: the masked URL, the path, or ``the default state root``."""
        if self.url is not None:
            return mask_url(self.url)
        return str(self.path) if self.path is not None else "the default state root"

    def __repr__(self) -> str:
        return f"StoreLocation(kind={self.kind!r}, display={self.display!r})"


def _bad(value: str, source: str, why: str) -> ConfigError:
    return ConfigError(
        f"{source} is not a store: {why} ({mask_url(value)!r})",
        code=STORE_URL, location=source,
        suggestion=f"give {_ACCEPTED}, or leave it unset for the default state root",
    )


def _parse_postgres(value: str, source: str) -> StoreLocation:
    try:
        parts = urlsplit(value)
        port = parts.port  # raises ValueError when not a number in 0..65535
    except ValueError as exc:
        raise _bad(value, source, f"malformed URL ({mask_url(str(exc))})") from None
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    if not parts.hostname and not query.get("host"):
        raise _bad(value, source, "no host")
    if port == 0:
        raise _bad(value, source, "port 0")
    if parts.fragment:
        raise _bad(value, source, "a URL fragment (#…) has no meaning here")
    database = parts.path.lstrip("/")
    if "/" in database:
        raise _bad(value, source, "the database name contains '/'")
    for password in (parts.password, query.get("password")):
        if password:
            register_secret(password)
            register_secret(unquote(password))
    return StoreLocation("postgres", url=value)


def parse_store(
    value: str | os.PathLike[str] | None = None,
    *,
    env: Mapping[str, str] | None = None,
    source: str = "--store",
) -> StoreLocation:
    """Parse ``--store`` (``value``), falling back to ``GOONDAN_STORE``; ``E_STORE_URL`` if bad."""
    if value is None or str(value).strip() == "":
        environ = os.environ if env is None else env
        value = environ.get(ENV_STORE, "")
        source = ENV_STORE
        if value.strip() == "":
            return StoreLocation("jsonl")
    text = os.fspath(value).strip()
    scheme = _SCHEME.match(text)
    if scheme is not None and "://" in text:
        name = scheme.group(1).lower()
        if name in POSTGRES_SCHEMES:
            return _parse_postgres(text, source)
        raise _bad(text, source, f"unknown scheme {name!r}")
    if scheme is not None and scheme.group(1).lower() in POSTGRES_SCHEMES:
        raise _bad(text, source, "write postgresql://HOST/DATABASE")
    return StoreLocation("jsonl", path=Path(text).expanduser())
