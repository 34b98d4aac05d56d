"""The studio page over a PostgreSQL store in headless chromium (fixtures of conftest.py): the
store's URL shown masked, a conversation of the store that shows a turn committed while the
page is open without reloading, and the Traces page listing the store's traces."""

from __future__ import annotations

import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from goondan.llm.testing import ScriptedModel
from goondan.runtime import Runtime
from goondan.storage.postgres.backend import PostgresBackend
from goondan.storage.url import mask_url, parse_store
from goondan.studio.server import StudioServer
from tests.support.aio import run
from tests.support.postgres import password_of

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "approvals"


@pytest.fixture()
def studio(postgres_url: str, tmp_path: Path) -> Iterator[tuple[StudioServer, Path]]:
    bundle = tmp_path / "bundle"
    shutil.copytree(EXAMPLE, bundle)
    (bundle / "work").mkdir()
    parse_store(postgres_url)  # registers the password for masking, as the command does
    backend = PostgresBackend.open(postgres_url)
    try:
        with StudioServer(tmp_path / "state", port=0, backend=backend,
                          store=mask_url(postgres_url)).start() as server:
            yield server, bundle
    finally:
        backend.close()


def _turn(url: str, bundle: Path, state: Path, text: str, answer: str) -> None:
    """One turn of a Runtime on the store (in a thread of its own: the page's driver owns this
    one)."""
    async def main() -> None:
        storage = PostgresBackend.open(url)
        try:
            async with Runtime.from_bundle(bundle, storage=storage, state_root=state,
                                           models={"assistant": ScriptedModel([answer])}) as rt:
                await rt.run_turn(None, text, instance_key="k")
        finally:
            storage.close()

    failed: list[BaseException] = []

    def target() -> None:
        try:
            run(main())
        except BaseException as exc:  # reported by the test's thread
            failed.append(exc)

    thread = threading.Thread(target=target)
    thread.start()
    thread.join(60)
    assert not thread.is_alive() and not failed, failed


def test_a_store_conversation_shows_a_turn_committed_while_the_page_is_open(
    studio: tuple[StudioServer, Path], postgres_url: str, page: Any, tmp_path: Path,
) -> None:
    server, bundle = studio
    password = password_of(postgres_url)
    _turn(postgres_url, bundle, tmp_path / "rt", "hello store", "first answer")
    page.goto(server.url)
    store = page.locator("#store")
    store.wait_for()
    assert store.text_content() == mask_url(postgres_url)
    page.get_by_role("link", name="k", exact=True).click()
    page.locator(".msg-assistant .msg-text", has_text="first answer").wait_for()
    page.locator("#live.on").wait_for()  # the stream is open
    page.evaluate("window.__sameDocument = true")
    _turn(postgres_url, bundle, tmp_path / "rt", "again", "second answer")
    page.locator(".msg-assistant .msg-text", has_text="second answer").wait_for()
    assert page.evaluate("window.__sameDocument") is True  # no reload: the stream brought it
    assert password not in page.content()
    page.goto(server.url + "traces")  # the store's traces (the turns' state root is elsewhere)
    page.get_by_role("cell", name="turn assistant").first.wait_for()
    assert page.locator("#trace-note").count() == 0
