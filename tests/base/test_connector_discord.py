"""Connector ``discord`` of ``@goondan/base``: Interactions requests signed as Discord signs
them (Ed25519 over timestamp + body, made here by the ``cryptography`` package)."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import given, settings
from hypothesis import strategies as st

from goondan.errors import ConnectorError
from tests.support.connector_harness import (
    RecordingInbox,
    load_connector,
    make_context,
    post,
    running,
)

discord = load_connector("discord")
KEY = Ed25519PrivateKey.from_private_bytes(bytes(range(32)))
PUBLIC_HEX = (
    KEY.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw).hex()
)


def signed(
    body: bytes, *, timestamp: int | None = None, key: Ed25519PrivateKey = KEY
) -> dict[str, str]:
    ts = str(int(time.time()) if timestamp is None else timestamp)
    return {"X-Signature-Ed25519": key.sign(ts.encode() + body).hex(), "X-Signature-Timestamp": ts,
            "Content-Type": "application/json"}


def interaction(kind: int, data: dict[str, Any] | None = None, *, id: str = "1100000000000000001",
                guild: bool = True) -> bytes:
    body: dict[str, Any] = {"id": id, "application_id": "1000000000000000042", "type": kind,
                            "token": "aW50ZXJhY3Rpb24tdG9rZW4", "version": 1, "channel_id": "C77"}
    if data is not None:
        body["data"] = data
    user = {"id": "U5", "username": "alice", "global_name": "Alice"}
    if guild:
        body |= {"guild_id": "G9", "member": {"user": user, "roles": []}}
    else:
        body["user"] = user
    return json.dumps(body).encode()


SLASH = {"id": "cmd1", "name": "deploy", "type": 1, "options": [
    {"name": "staging", "type": 1, "options": [{"name": "branch", "type": 3, "value": "main"},
                                               {"name": "force", "type": 5, "value": True}]}]}


def context(tmp_path: Path, inbox: RecordingInbox, secrets: dict[str, str] | None = None,
            **config: str) -> Any:
    return make_context(tmp_path, inbox, connector="discord", config={"PORT": "0", **config},
                        secrets={"DISCORD_PUBLIC_KEY": PUBLIC_HEX} if secrets is None else secrets)


def test_ping_is_answered_and_an_unsigned_ping_is_refused(tmp_path: Path) -> None:
    """Discord's own endpoint check: a signed PING gets PONG, an unsigned or badly signed one
    401."""
    async def body() -> None:
        inbox = RecordingInbox()
        async with running(discord, context(tmp_path, inbox)) as url:
            raw = interaction(1)
            assert await post(url, raw, signed(raw)) == (200, {"type": 1})
            assert await post(url, raw, {"Content-Type": "application/json"}) == \
                (401, {"ok": False, "error": "missing_signature"})
            other = Ed25519PrivateKey.from_private_bytes(bytes(32))
            assert await post(url, raw, signed(raw, key=other)) == (
                401,
                {"ok": False, "error": "invalid_signature"},
            )
            assert inbox.calls == 0

    asyncio.run(body())


def test_a_slash_command_becomes_an_event_and_is_deferred(tmp_path: Path) -> None:
    async def body() -> None:
        inbox = RecordingInbox()
        async with running(discord, context(tmp_path, inbox)) as url:
            raw = interaction(2, SLASH)
            assert await post(url, raw, signed(raw)) == (200, {"type": 5})
            assert await post(url, raw, signed(raw)) == (200, {"type": 5})  # a repeat: stored once
        [event] = inbox.events
        assert event.name == "slash_command"
        assert event.instance_key == "discord:C77"
        assert event.id == "discord-1100000000000000001"
        assert event.message["text"] == "/deploy staging branch=main force=true"
        assert event.properties == {
            "interaction_id": "1100000000000000001", "application_id": "1000000000000000042",
            "interaction_token": "aW50ZXJhY3Rpb24tdG9rZW4", "channel_id": "C77", "guild_id": "G9",
            "user_id": "U5", "username": "alice", "command_name": "deploy"}

    asyncio.run(body())


def test_components_and_modals_become_component_interactions(tmp_path: Path) -> None:
    async def body() -> None:
        inbox = RecordingInbox()
        async with running(discord, context(tmp_path, inbox)) as url:
            button = interaction(
                3, {"custom_id": "approve:42", "component_type": 2}, id="21", guild=False
            )
            select = interaction(
                3, {"custom_id": "env", "component_type": 3, "values": ["prod", "eu"]}, id="22"
            )
            modal = interaction(
                5,
                {
                    "custom_id": "feedback",
                    "components": [
                        {
                            "type": 1,
                            "components": [{"type": 4, "custom_id": "title", "value": "Slow"}],
                        },
                        {
                            "type": 1,
                            "components": [{"type": 4, "custom_id": "detail", "value": "It hangs"}],
                        },
                    ],
                },
                id="23",
            )
            for raw in (button, select, modal):
                assert await post(url, raw, signed(raw)) == (200, {"type": 6})
            autocomplete = interaction(4, {"name": "deploy", "options": []}, id="24")
            assert await post(url, autocomplete, signed(autocomplete)) == \
                (200, {"type": 8, "data": {"choices": []}})
        texts = [(e.name, e.message["text"], e.properties["custom_id"]) for e in inbox.events]
        assert texts == [
            ("component_interaction", "approve:42", "approve:42"),
            ("component_interaction", "env\nvalues=prod,eu", "env"),
            ("component_interaction", "feedback\ntitle=Slow\ndetail=It hangs", "feedback"),
        ]
        assert "guild_id" not in inbox.events[0].properties  # a direct message: user, no member
        assert inbox.events[0].properties["user_id"] == "U5"

    asyncio.run(body())


def test_stale_timestamps_bad_bodies_and_unknown_interactions_are_refused(tmp_path: Path) -> None:
    async def body() -> None:
        inbox = RecordingInbox()
        async with running(discord, context(tmp_path, inbox)) as url:
            raw = interaction(2, SLASH)
            now = int(time.time())
            assert await post(url, raw, signed(raw, timestamp=now - 301)) == \
                (401, {"ok": False, "error": "stale_timestamp"})  # a replay of an old request
            headers = signed(raw)
            headers["X-Signature-Timestamp"] = str(int(headers["X-Signature-Timestamp"]) - 1)
            assert (await post(url, raw, headers))[0] == 401  # the timestamp is signed too
            assert (await post(url, raw, {**signed(raw), "X-Signature-Ed25519": "zz"}))[0] == 401
            assert (await post(url, b"{oops", signed(b"{oops")))[0] == 400
            deep = b"[" * 100_000 + b"]" * 100_000
            assert await post(url, deep, signed(deep)) == (
                400,
                {"ok": False, "error": "json_too_deep"},
            )
            no_channel = json.dumps({"id": "5", "type": 2, "data": SLASH}).encode()
            assert (await post(url, no_channel, signed(no_channel)))[0] == 400
            assert inbox.calls == 0
            inbox.fail = OSError("disk full")
            assert await post(url, raw, signed(raw)) == (503, {"ok": False, "error": "not_stored"})

    asyncio.run(body())


def test_without_a_public_key_it_refuses_to_start_unless_allowed(tmp_path: Path) -> None:
    async def body() -> None:
        inbox = RecordingInbox()
        with pytest.raises(ConnectorError) as refused:
            async with running(discord, context(tmp_path, inbox, secrets={})):
                pass
        assert refused.value.code == "E_CONNECTOR_UNSIGNED"
        with pytest.raises(ConnectorError) as bad:
            async with running(
                discord, context(tmp_path, inbox, secrets={"DISCORD_PUBLIC_KEY": "abc"})
            ):
                pass
        assert bad.value.code == "E_BASE_CONNECTOR_CONFIG"
        async with running(
            discord, context(tmp_path, inbox, secrets={}, ALLOW_UNSIGNED="true")
        ) as url:
            raw = interaction(2, SLASH)
            assert await post(url, raw, {"Content-Type": "application/json"}) == (200, {"type": 5})
        # The key is public: config DISCORD_PUBLIC_KEY works as well as the secret.
        async with running(
            discord, context(tmp_path, inbox, secrets={}, DISCORD_PUBLIC_KEY=PUBLIC_HEX)
        ) as url:
            raw = interaction(1)
            assert await post(url, raw, signed(raw)) == (200, {"type": 1})
            assert (await post(url, raw, {"Content-Type": "application/json"}))[0] == 401

    asyncio.run(body())


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=12,
)
_keys = st.sampled_from(
    [
        "id",
        "type",
        "data",
        "channel_id",
        "channel",
        "member",
        "user",
        "token",
        "application_id",
        "guild_id",
        "name",
        "options",
        "custom_id",
        "values",
        "components",
        "value",
    ]
)


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(
        _keys, st.integers(1, 5) | _json | st.dictionaries(_keys, _json, max_size=5), max_size=8
    )
)
def test_any_interaction_shape_gives_an_event_or_none_never_an_error(
    interaction: dict[str, Any],
) -> None:
    event = discord.to_event(interaction)
    if event is not None:
        assert event.instance_key.startswith("discord:")
        assert all(isinstance(v, str) for v in event.properties.values())


def test_a_timestamp_too_large_for_a_float_is_refused_not_a_server_error(tmp_path: Path) -> None:
    async def body() -> None:
        inbox = RecordingInbox()
        async with running(discord, context(tmp_path, inbox)) as url:
            raw = interaction(2, SLASH)
            huge = "1" + "0" * 400  # an int, but now - int(...) overflows a float
            headers = {**signed(raw), "X-Signature-Timestamp": huge}
            assert await post(url, raw, headers) == (
                401,
                {"ok": False, "error": "invalid_signature"},
            )
            assert inbox.calls == 0

    asyncio.run(body())
