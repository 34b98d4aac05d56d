"""Browser tests of the studio page (issue 35): Debian's chromium driven by Playwright.

Playwright cannot download its own browsers here, so it drives the system one
(``/usr/bin/chromium``, installed by ``make system-packages``; ``GOONDAN_CHROMIUM`` points
elsewhere).
One browser per test module (``browser``), a fresh context per test (``page``) whose JavaScript
errors fail the test. Without Playwright or chromium the tests are skipped with the reason.

``GOONDAN_STUDIO_SCREENSHOTS=1`` makes :func:`shoot` rewrite the committed screenshots in
docs/studio/ (docs/studio.md "Screenshots"); a normal run writes nothing there.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
SHOTS = REPO / "docs" / "studio"
CHROMIUM = Path(os.environ.get("GOONDAN_CHROMIUM", "/usr/bin/chromium"))
# Flags that work in this container (no GPU, no sandbox as root, nothing phoning home);
# Playwright adds --headless and a fresh temporary --user-data-dir itself.
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
VIEWPORT = {"width": 1280, "height": 800}


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright (dev extras)")
    if not CHROMIUM.exists():
        pytest.skip(f"no browser at {CHROMIUM} (make system-packages installs Debian's chromium)")
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        try:
            yield launched
        finally:
            launched.close()


def new_page(browser: Any, errors: list[str], **options: Any) -> Any:
    """A page in a fresh context (1280×800 unless ``viewport`` is given) recording the page's
    uncaught JavaScript errors and console errors into ``errors``."""
    context = browser.new_context(**{"viewport": VIEWPORT, **options})
    context.set_default_timeout(30_000)  # failure-only: a loaded machine is slow, not broken
    page = context.new_page()
    page.on("pageerror", lambda exc: errors.append(f"pageerror: {exc}"))
    # (a 404 answer the page shows as such is logged by the browser itself: not an error)
    page.on("console", lambda msg: errors.append(f"console: {msg.text}")
            if msg.type == "error" and not msg.text.startswith("Failed to load resource")
            else None)
    return page


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    errors: list[str] = []
    opened = new_page(browser, errors)
    try:
        yield opened
    finally:
        opened.context.close()
    assert errors == [], errors


def shoot(page: Any, name: str) -> None:
    """Write docs/studio/<name>.png (the viewport) when GOONDAN_STUDIO_SCREENSHOTS=1."""
    if os.environ.get("GOONDAN_STUDIO_SCREENSHOTS") != "1":
        return
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.wait_for_selector("#live.on")  # the live badge as a user sees it, not "offline"
    page.screenshot(path=str(SHOTS / f"{name}.png"))
