"""Issue 27 item 6, secrets past the mask: text cut short must keep no start of a secret.

Repros: ``file-system__read .env`` with a ``maxBytes`` ending inside the key stored 41 of its
42 characters; ``bash__exec`` output cut at its cap kept a 29-character prefix; the masking that
follows (``finalize_output``) only knew whole secrets. Streamed answers split a key across
deltas, each delta masked alone; ``inspect`` clipped a long text before masking it.
"""

from __future__ import annotations

import io
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

from goondan.commands.inspect import format_message
from goondan.console.render import TurnRenderer
from goondan.conversation.messages import Message
from goondan.secrets import MASK, StreamMasker, mask_cut, register_secret
from goondan.tools import ToolContext, load_entry_module
from goondan.tools.output import finalize_output
from tests.support.aio import run
from tests.support.loopback import loopback_server, url_of

TOOLS = (
    Path(__file__).resolve().parents[2]
    / "goondan"
    / "builtin_packages"
    / "@goondan"
    / "base"
    / "tools"
)
fs = load_entry_module(TOOLS / "file_system.py").handlers
bash = load_entry_module(TOOLS / "bash.py").handlers
http_fetch = load_entry_module(TOOLS / "http_fetch.py").handlers

KEY = "sk-cut-secret-0123456789abcdefghijklmnopq"  # 41 characters
register_secret(KEY)


def _ctx(workdir: Path, cap: int = 256 * 1024) -> ToolContext:
    # allowHosts opens the loopback test server to http-fetch (refused by default).
    return ToolContext("a", "k", "t", "0" * 32, "c", None, workdir, max_output_bytes=cap,
                       config={"allowHosts": ["127.0.0.1"]})


def _no_prefix(text: str, minimum: int = 8) -> bool:
    """True when ``text`` holds no run of ``minimum`` or more characters of KEY's start."""
    return KEY[:minimum] not in text


def test_a_read_cut_inside_the_key_keeps_none_of_it(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text(f"API_KEY={KEY}\nOTHER=1\n", encoding="utf-8")
    for cut in (len("API_KEY=") + 8, len("API_KEY=") + len(KEY) - 1):
        out = fs["read"](_ctx(tmp_path), {"path": ".env", "maxBytes": cut})
        assert out["truncated"] is True
        stored = finalize_output(out, limit=256 * 1024)
        assert isinstance(stored, dict)
        assert stored["content"] == f"API_KEY={MASK}"
    # Shorter than 8 characters of the key: nothing to hide yet, nothing garbled.
    out = fs["read"](_ctx(tmp_path), {"path": ".env", "maxBytes": len("API_KEY=") + 3})
    assert out["content"] == "API_KEY=" + KEY[:3]


def test_bash_output_cut_at_its_cap_keeps_none_of_the_key(tmp_path: Path) -> None:
    # bash keeps cap // 2 - 512 = 64 bytes per stream: 35 of filler and the key's first 29.
    cap = 2 * (64 + 512)
    filler = "x" * 35
    out = run(bash["exec"](_ctx(tmp_path, cap), {"command": f"printf '%s' '{filler}{KEY}{KEY}'"}))
    assert out["truncated"] is True
    # The dropped count still counts the bytes of the command's output, not of the mask.
    assert out["stdout"] == f"{filler}{MASK}…[truncated {len(filler) + 2 * len(KEY) - 64} bytes]"


class _KeyPage(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        body = f"token={KEY}\n".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def test_an_http_body_cut_inside_the_key_keeps_none_of_it(tmp_path: Path) -> None:
    with loopback_server(_KeyPage) as server:
        out = run(
            http_fetch["get"](
                _ctx(tmp_path), {"url": f"{url_of(server)}/", "maxBytes": len("token=") + 20}
            )
        )
    assert out["truncated"] is True and out["body"] == f"token={MASK}"


def test_mask_cut_hides_only_a_start_of_eight_or_more_at_the_end() -> None:
    assert mask_cut("value " + KEY[:8]) == "value " + MASK
    assert mask_cut("value " + KEY[:7]) == "value " + KEY[:7]
    assert mask_cut(KEY[:20] + " and more") == KEY[:20] + " and more"  # not at a cut
    assert mask_cut(f"{KEY} and {KEY[:30]}") == f"{MASK} and {MASK}"


def test_streamed_deltas_never_show_a_split_key() -> None:
    masker = StreamMasker()
    pieces = ["your key: sk-", "cut-se", "cret-0123456789", "abcdefghijklmnopq, done", " bye"]
    shown = "".join(masker.feed(p) for p in pieces) + masker.flush()
    assert shown == f"your key: {MASK}, done bye"
    out = io.StringIO()
    renderer = TurnRenderer(out, color=False, tty=False, stream=True)
    for piece in pieces:
        renderer.handle({"type": "llm.delta", "kind": "text", "text": piece})
    renderer.end_turn(None)
    assert out.getvalue().strip() == f"your key: {MASK}, done bye"


def test_inspect_masks_before_it_clips() -> None:
    text = "y" * 590 + KEY
    shown = "\n".join(format_message(1, Message.user(text)))
    assert _no_prefix(shown) and "y" * 590 in shown
