"""Bundles using the built-in connectors validate: examples/webhook and every complete bundle
in docs/base-connectors.md."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from goondan.config import validate_bundle

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "base-connectors.md"
BUNDLES = [
    block
    for block in re.findall(r"```yaml\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
    if "kind: Package" in block
]


def test_the_webhook_example_validates(state_root: Path) -> None:
    report = validate_bundle(ROOT / "examples" / "webhook", env={"WEBHOOK_SIGNING_SECRET": "x"})
    assert report.valid, [d.to_dict() for d in report.errors]
    assert report.warnings == []
    assert report.bundle is not None
    connection = report.bundle.of_kind("Connection")[0]
    assert connection.spec["config"]["PORT"] == {"value": "8080"}


def test_the_docs_have_a_bundle_per_connector() -> None:
    names = {re.search(r"Connector, name: ([a-z-]+), package", b).group(1) for b in BUNDLES}  # type: ignore[union-attr]
    assert names == {"webhook", "github", "slack", "discord", "telegram-polling"}


@pytest.mark.parametrize(
    "bundle", BUNDLES, ids=lambda b: re.search(r"name: ([a-z-]+)}", b).group(1)
)  # type: ignore[union-attr]
def test_every_documented_bundle_validates(tmp_path: Path, state_root: Path, bundle: str) -> None:
    (tmp_path / "goondan.yaml").write_text(bundle, encoding="utf-8")
    report = validate_bundle(tmp_path, env={})
    assert report.valid, [d.to_dict() for d in report.errors]
    assert all(d.code == "W_CONFIG_ENV_UNSET" for d in report.warnings), [
        d.to_dict() for d in report.warnings
    ]


def _declared() -> dict[tuple[str, str], set[str]]:
    import yaml

    docs = yaml.safe_load_all(
        (ROOT / "goondan" / "builtin_packages" / "@goondan" / "base" / "goondan.yaml").read_text(
            encoding="utf-8"
        )
    )
    return {(d["metadata"]["name"], e["name"]): set(e.get("properties") or {})
            for d in docs if d["kind"] == "Connector" for e in d["spec"]["events"]}


def test_emitted_properties_are_declared_by_the_connector_resources() -> None:
    from tests.support.connector_harness import load_connector
    declared = _declared()
    github = load_connector("github")
    pull = {
        "action": "opened",
        "number": 1,
        "repository": {"full_name": "o/r"},
        "sender": {"login": "m"},
        "pull_request": {"title": "t", "head": {"ref": "b"}},
    }
    slack = load_connector("slack").to_event(
        {
            "event_id": "E",
            "event": {
                "type": "app_mention",
                "channel": "C",
                "ts": "1.1",
                "thread_ts": "1.0",
                "user": "U",
                "subtype": "file_share",
                "files": [
                    {"name": "a.png", "mimetype": "image/png", "url_private": "https://x/a.png"}
                ],
            },
        }
    )
    telegram = load_connector("telegram_polling").to_event(
        {
            "update_id": 1,
            "message": {
                "message_id": 2,
                "date": 3,
                "chat": {"id": 4, "type": "group", "title": "T", "username": "g"},
                "from": {
                    "id": 5,
                    "is_bot": False,
                    "username": "u",
                    "first_name": "F",
                    "last_name": "L",
                },
                "caption": "c",
                "photo": [
                    {
                        "file_id": "p",
                        "file_unique_id": "pu",
                        "width": 1,
                        "height": 1,
                        "file_size": 9,
                    }
                ],
                "document": {
                    "file_id": "d",
                    "file_unique_id": "du",
                    "file_name": "d.png",
                    "mime_type": "image/png",
                    "file_size": 9,
                },
            },
        }
    )
    user = {"id": "U", "username": "u"}
    discord = load_connector("discord")
    slash = discord.to_event(
        {
            "id": "1",
            "application_id": "2",
            "token": "t",
            "type": 2,
            "channel_id": "C",
            "guild_id": "G",
            "member": {"user": user},
            "data": {"name": "ask"},
        }
    )
    button = discord.to_event({"id": "3", "type": 3, "channel_id": "C", "user": user,
                               "data": {"custom_id": "ok"}})
    events = [("github", github.to_event("pull_request", pull, "g1")), ("slack", slack),
              ("telegram-polling", telegram), ("discord", slash), ("discord", button)]
    for connector, event in events:
        assert event is not None
        assert set(event.properties) <= declared[(connector, event.name)], (connector, event.name)
    assert set(telegram.properties) == declared[("telegram-polling", "telegram_message")]
