"""``goondan studio``: the local web page over the state root (docs/studio.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from goondan.commands.common import bundle_option, get_globals, store_option

__all__ = ["studio"]


@click.command("studio")
@bundle_option(
    type=click.Path(exists=True, file_okay=False),
    help="Also mask this bundle's secrets [default: the current directory's bundle].",
)
@click.option("--state-root", type=click.Path(), default=None, help="State root to show.")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on; anything but loopback needs --token.")
@click.option("--port", type=click.IntRange(0, 65535), default=7878, show_default=True,
              help="Port to listen on (0: a free one, printed).")
@click.option("--token", default=None, envvar="GOONDAN_STUDIO_TOKEN",
              help="Require this token on every API request [env: GOONDAN_STUDIO_TOKEN].")
@click.option("--open", "open_browser", is_flag=True, help="Open the page in a web browser.")
@store_option
def studio(bundle: str | None, state_root: str | None, host: str, port: int,
           token: str | None, open_browser: bool, store: str | None = None) -> None:
    """Serve the studio: running swarms, conversations, traces and approvals in a web page."""
    from goondan.commands.store_read import jsonl_root, postgres_location
    from goondan.secrets import register_secret
    from goondan.storage.backends import open_backend

    register_secret(token)  # never shown, like every other secret
    options = get_globals()
    location = postgres_location(store)  # E_STORE_URL; its password is registered as secret
    root = options.resolve_state_root(jsonl_root(store, state_root))
    bundle = bundle or options.bundle
    backend = open_backend(location) if location is not None else None  # E_STORE_UNAVAILABLE
    try:
        _serve(root, bundle, host, port, token, open_browser, backend,
               location.display if location is not None else None)
    finally:
        if backend is not None:
            backend.close()


def _serve(root: Path, bundle: str | None, host: str, port: int, token: str | None,
           open_browser: bool, backend: Any, store: str | None) -> None:
    from goondan.studio.record import clear_studio_record, write_studio_record
    from goondan.studio.server import StudioServer

    # What the page shows is masked like inspect's output: the bundles of the state root's
    # workspaces and running swarms (also those that appear later), and this one.
    server = StudioServer(root, host=host, port=port, token=token,
                          bundles=(Path(bundle),) if bundle else (), backend=backend,
                          store=store)
    server.refresh_secrets()
    record = write_studio_record(root, server.url)  # inspect trace prints links to it
    click.echo(f"studio: {server.url}")
    if store is not None:
        click.echo(f"  store {store} (PostgreSQL)")
    click.echo(f"  state root {root}" + ("; API requests need the token (?token=…)"
                                         if token else "") + "; Ctrl-C stops it")
    if open_browser:
        import webbrowser

        webbrowser.open(server.url + (f"?token={token}" if token else ""))
    try:
        server.serve_forever()
    finally:  # Ctrl-C: open event streams end, the port is freed; the CLI exits 130
        server.close()
        clear_studio_record(record)
