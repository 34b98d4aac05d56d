"""``python -m goondan`` (and the ``goondan``/``gdn`` scripts) run the CLI."""

from __future__ import annotations


def run() -> None:
    """Run the CLI with the cyclic GC paused from the first import and the compiled dataclass
    methods of earlier starts in place (docs/runtime.md "Performance"); the command turns the
    GC back on once started (``goondan.commands.common.startup_done``)."""
    import gc

    was_enabled = gc.isenabled()
    gc.disable()
    from goondan.codecache import install

    install()  # before the CLI's own dataclasses are created (goondan/codecache.py)
    from goondan.cli import main
    from goondan.commands import common

    common.adopt_paused_gc(was_enabled)
    main()


if __name__ == "__main__":
    run()
