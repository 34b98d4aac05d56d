"""``--store`` / ``GOONDAN_STORE`` (goondan/storage/url.py): which backend, and a URL's password
never shown."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from goondan.errors import ConfigError
from goondan.storage.url import mask_url, parse_store, redact

SECRET = "s3cr%3Et-pw"
URL = f"postgresql://goondan:{SECRET}@db.internal:5433/goondan?sslmode=require"


def test_absent_or_empty_means_the_default_jsonl_state_root() -> None:
    for value in (None, "", "  "):
        location = parse_store(value, env={})
        assert (location.kind, location.path, location.url) == ("jsonl", None, None)


def test_a_path_is_a_jsonl_state_root(tmp_path: Path) -> None:
    location = parse_store(str(tmp_path / "state"), env={})
    assert (location.kind, location.path) == ("jsonl", tmp_path / "state")
    assert parse_store("~/st", env={}).path == Path("~/st").expanduser()


def test_a_postgresql_url_selects_postgres_and_keeps_the_url_for_the_driver() -> None:
    for url in (URL, "postgres://u@localhost/db", "postgresql:///db?host=/var/run/postgresql"):
        location = parse_store(url, env={})
        assert (location.kind, location.url) == ("postgres", url)


def test_the_option_wins_over_goondan_store_and_the_variable_is_used_without_it() -> None:
    env = {"GOONDAN_STORE": URL}
    assert parse_store(None, env=env).kind == "postgres"
    assert parse_store("/srv/state", env=env).kind == "jsonl"


def test_the_display_form_and_repr_never_hold_the_password() -> None:
    location = parse_store(URL, env={})
    assert location.display == "postgresql://goondan:***@db.internal:5433/goondan?sslmode=require"
    assert SECRET not in repr(location)
    assert SECRET not in str(location)


@pytest.mark.parametrize(
    ("value", "why"),
    [
        (f"mysql://u:{SECRET}@h/db", "unknown scheme 'mysql'"),
        (f"postgresql://u:{SECRET}@h:99999/db", "malformed URL"),
        (f"postgresql://u:{SECRET}@h:port/db", "malformed URL"),
        (f"postgresql://u:{SECRET}@/db", "no host"),
        (f"postgresql://u:{SECRET}@h/db#frag", "fragment"),
        (f"postgresql://u:{SECRET}@h/a/b", "contains '/'"),
        ("postgresql:h/db", "write postgresql://"),
    ],
)
def test_a_bad_url_is_e_store_url_and_its_message_masks_the_password(
    value: str, why: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_store(value, env={})
    error = caught.value
    assert error.code == "E_STORE_URL"
    assert why in error.message
    assert error.location == "--store"
    assert SECRET not in str(error.to_dict())


def test_a_bad_goondan_store_names_the_variable() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_store(None, env={"GOONDAN_STORE": f"redis://:{SECRET}@h"})
    assert caught.value.location == "GOONDAN_STORE"
    assert SECRET not in str(caught.value.to_dict())


def test_mask_url_masks_user_info_and_query_passwords_even_in_free_text() -> None:
    text = f"failed: {URL} and host=h password={SECRET} user=u and ?password={SECRET}&x=1"
    masked = mask_url(text)
    assert SECRET not in masked
    assert "goondan:***@db.internal" in masked
    assert masked.count("password=***") == 2


def test_redact_removes_the_password_wherever_a_driver_message_repeats_it() -> None:
    raw = f'connection to "db.internal" failed for password "{SECRET}"'
    assert SECRET not in redact(raw, URL)


def test_parsing_a_store_never_imports_the_database_driver() -> None:
    code = (
        "import sys, goondan, goondan.storage, goondan.storage.url as u;"
        f"u.parse_store({URL!r});"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('psycopg','psycopg_pool')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "[]"


def test_parsing_a_url_registers_its_password_as_a_secret_for_every_output() -> None:
    from urllib.parse import unquote

    from goondan.secrets import mask

    secret = "pw-" + "q7Zr91xLm"
    parse_store(f"postgresql://u:{secret}%21@h/db?password=Other{secret}", env={})
    text = f"oops {secret}%21 / {secret}! / Other{secret}"
    assert secret not in mask(text)
    assert unquote(f"{secret}%21") not in mask(text)
