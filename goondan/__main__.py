"""``python -m goondan`` (and the ``goondan``/``gdn`` scripts) run the CLI."""

from __future__ import annotations


def run() -> None:
    """Run the CLI with the compiled dataclass methods of earlier starts in place
    (goondan/codecache.py; docs/runtime.md "Performance")."""
    from goondan.codecache import install

    install()  # before the CLI's own dataclasses are created
    from goondan.cli import main

    main()


if __name__ == "__main__":
    run()
