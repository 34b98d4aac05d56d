"""Terminal front-end shared by ``goondan repl`` and ``goondan run``'s interactive mode.

* :mod:`goondan.console.render` — streamed text, tool lines and a spinner from runtime events;
* :mod:`goondan.console.prompt` — readline input, history file, multi-line entries;
* :mod:`goondan.console.session` — the interactive loop, slash commands, the batch mode;
* :mod:`goondan.console.backend` — the :class:`ReplBackend` protocol and its in-process form.
"""

from __future__ import annotations

from goondan.console.backend import InstanceBackend, ReplBackend
from goondan.console.prompt import LineReader, join_multiline
from goondan.console.render import Style, TurnRenderer, short_args
from goondan.console.session import ReplSession, format_message, result_json, run_batch, run_once

__all__ = [
    "InstanceBackend",
    "LineReader",
    "ReplBackend",
    "ReplSession",
    "Style",
    "TurnRenderer",
    "format_message",
    "join_multiline",
    "result_json",
    "run_batch",
    "run_once",
    "short_args",
]
