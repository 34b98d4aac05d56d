"""Hostile input, item 2: tool outputs have a size limit (docs/tools.md, "Output cap").

Repros: ``bash__exec`` of 500 MB (1.9 GB RSS, a 500 MB JSONL line), ``file-system__read`` and
``http-fetch__get`` with any ``maxBytes`` the model likes, a 200 KB gzip bomb becoming 1.2 GB.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from goondan.cli import cli
from goondan.llm.testing import ScriptedModel
from goondan.runtime import Runtime
from goondan.tools import ToolContext, ToolRegistry, load_entry_module
from goondan.tools.executor import ToolExecutor
from goondan.tools.output import DEFAULT_MAX_OUTPUT_BYTES, TRUNCATED_KEY, ToolSettings, cap_output
from goondan.types import ToolCall
from tests.support.aio import run
from tests.support.hostile import write_bundle
from tests.support.loopback import loopback_server, url_of

TOOLS = (
    Path(__file__).resolve().parents[2]
    / "goondan"
    / "builtin_packages"
    / "@goondan"
    / "base"
    / "tools"
)
bash = load_entry_module(TOOLS / "bash.py").handlers
fs = load_entry_module(TOOLS / "file_system.py").handlers
http = load_entry_module(TOOLS / "http_fetch.py").handlers

BOMB = gzip.compress(b"\0" * 50_000_000, compresslevel=9)   # ~50 KB on the wire, 50 MB inflated


def _size(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))


def ctx(workdir: Path, cap: int = DEFAULT_MAX_OUTPUT_BYTES, **config: Any) -> ToolContext:
    return ToolContext("agent", "key", "turn-1", "0" * 32, "call-1", None, workdir,
                       config=config, max_output_bytes=cap)


# -- the cap itself -------------------------------------------------------------------------------

@pytest.mark.parametrize("output", [
    "é" * 300_000,
    {"stdout": "a" * 400_000, "stderr": "b" * 50_000, "exitCode": 0, "command": "x"},
    [{"name": f"file-{i}", "size": i} for i in range(40_000)],
    {"deep": [{"text": "\n\t\"" * 30_000}] * 5},
])
def test_every_output_shape_is_cut_to_the_limit_and_marked(output: Any) -> None:
    limit = 10_000
    capped = cap_output(output, limit)
    assert _size(capped) <= limit
    if isinstance(capped, str):
        assert "output truncated" in capped
    else:
        assert capped[TRUNCATED_KEY]["originalBytes"] == _size(output)
        assert capped[TRUNCATED_KEY]["limitBytes"] == limit


def test_an_object_keeps_its_small_fields_and_shortens_the_big_ones() -> None:
    capped = cap_output({"stdout": "a" * 400_000, "stderr": "warn", "exitCode": 3}, 5_000)
    assert capped["stderr"] == "warn" and capped["exitCode"] == 3
    assert capped["stdout"].startswith("aaaa") and "…[truncated" in capped["stdout"]
    assert cap_output({"small": 1}, 5_000) == {"small": 1}


def test_the_executor_caps_and_spills(tmp_path: Path) -> None:
    registry = ToolRegistry()
    registry.register({"name": "big__make", "parameters": {"type": "object"}},
                      lambda _ctx, _args: "x" * 1_000_000)
    call = ToolCall("call/1", "big__make", {})

    def execute(settings: ToolSettings) -> Any:
        executor = ToolExecutor(registry, settings=settings)
        return run(executor.execute(call, catalog=["big__make"], context=ctx(tmp_path))).output

    out = execute(ToolSettings(max_output_bytes=4096))
    assert _size(out) <= 4096 and "output truncated" in out
    out = execute(ToolSettings(max_output_bytes=4096, spill=True))
    spilled = tmp_path / ".goondan" / "tool-output" / "call_1.json"
    assert str(spilled) in out and json.loads(spilled.read_text()) == "x" * 1_000_000
    out = execute(ToolSettings(max_output_bytes=4096, tool_max_output_bytes={"big": 100_000}))
    assert 90_000 < _size(out) <= 100_000


def test_agent_and_tool_overrides_are_valid_config_and_apply(
    tmp_path: Path, state_root: Path
) -> None:
    bundle = write_bundle(
        tmp_path,
        agent_extra="  maxToolOutputBytes: 3000\n  spillToolOutput: true\n",
        tools='    - ref: {kind: Tool, name: bash, package: "@goondan/base"}\n'
              '      config: {passEnv: [LANG]}\n'
              '    - ref: {kind: Tool, name: local}\n',
        extra_docs="""\
apiVersion: goondan.ai/v1
kind: Tool
metadata:
  name: local
spec:
  entry: ./local.py
  maxOutputBytes: 50000
  config: {greeting: hi}
  exports:
    - name: big
      parameters: {type: object}
""")
    (bundle / "local.py").write_text(
        "def big(ctx, args):\n    return ctx.config['greeting'] "
        "+ 'y' * 200000\n\nhandlers = {'big': big}\n"
    )
    result = CliRunner().invoke(cli, ["validate", str(bundle)])
    assert result.exit_code == 0, result.output
    model = ScriptedModel(
        [
            {
                "toolCalls": [
                    {
                        "name": "bash__exec",
                        "args": {"command": "head -c 100000 /dev/zero | tr '\\0' a"},
                    },
                    {"name": "local__big", "args": {}},
                ]
            },
            "done",
        ]
    )

    async def main() -> list[Any]:
        async with Runtime.from_bundle(bundle, state_root=state_root, models={"main": model}) as rt:
            await rt.run_turn("main", "go")
            instance = await rt.instance("main")
            return [
                m.data["content"][0]["output"]["value"]
                for m in instance.messages
                if m.role == "tool"
            ]

    bash_out, local_out = run(main())
    # bash reads within the Agent's cap by itself (ToolContext.max_output_bytes).
    assert _size(bash_out) <= 3000 and bash_out["truncated"] is True
    # The local Tool's own cap wins over the Agent's; its full output is spilled to the workdir.
    assert 3000 < _size(local_out) <= 50_000 and local_out.startswith("hi")
    spilled = Path(local_out.rsplit("full output in ", 1)[1].rstrip("]"))
    assert (
        spilled.is_relative_to(bundle / "work") and len(json.loads(spilled.read_text())) == 200_002
    )


# -- the tools read with a cap --------------------------------------------------------------------

def test_bash_reads_at_most_the_cap(tmp_path: Path) -> None:
    out = run(bash["exec"](ctx(tmp_path, cap=4000),
                           {"command": "head -c 5000000 /dev/zero | tr '\\0' a; echo done >&2"}))
    assert out["truncated"] is True and out["exitCode"] == 0
    # Each stream keeps half the cap less some room, so the whole result fits the cap.
    assert out["stdout"].startswith("a" * 1488) and len(out["stdout"].encode()) < 1600
    assert "truncated 4998512 bytes" in out["stdout"] and out["stderr"] == "done\n"
    assert len(json.dumps(out).encode()) <= 4000


def test_file_system_read_cannot_exceed_the_cap(tmp_path: Path) -> None:
    (tmp_path / "big.txt").write_bytes(b"z" * 100_000)
    out = fs["read"](ctx(tmp_path, cap=2000), {"path": "big.txt", "maxBytes": 10_000_000})
    assert out["truncated"] is True and len(out["content"]) == 2000 and out["size"] == 100_000


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        if self.path == "/bomb":
            body, headers = BOMB, {"Content-Encoding": "gzip"}
        elif self.path == "/deflate":
            body, headers = (
                __import__("zlib").compress(b"d" * 1_000_000),
                {"Content-Encoding": "deflate"},
            )
        elif self.path == "/plain":
            body, headers = b"p" * 2_000_000, {}
        else:
            body, headers = b"ok", {}
        self.send_response(200)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def base_url() -> Iterator[str]:
    with loopback_server(_Handler) as server:
        yield url_of(server)


def test_a_gzip_bomb_stops_at_the_decoded_limit(base_url: str, tmp_path: Path) -> None:
    out = run(
        http["get"](
            ctx(tmp_path, allowPrivate=True), {"url": f"{base_url}/bomb", "maxBytes": 10_000_000}
        )
    )
    assert out["truncated"] is True and len(out["body"]) == 500_000  # the hard maximum
    out = run(
        http["get"](
            ctx(tmp_path, maxBytes=1000, allowPrivate=True),
            {"url": f"{base_url}/bomb", "maxBytes": 50_000},
        )
    )
    assert len(out["body"]) == 1000  # config lowers it further
    out = run(
        http["get"](
            ctx(tmp_path, allowPrivate=True), {"url": f"{base_url}/deflate", "maxBytes": 300}
        )
    )
    assert out["body"] == "d" * 300 and out["truncated"] is True


def test_http_fetch_counts_the_bytes_on_the_wire(base_url: str, tmp_path: Path) -> None:
    context = dataclasses.replace(
        ctx(tmp_path), config={"maxWireBytes": 100_000, "maxBytes": 5_000_000, "allowPrivate": True}
    )
    out = run(http["get"](context, {"url": f"{base_url}/plain", "maxBytes": 5_000_000}))
    assert out["truncated"] is True and len(out["body"]) <= 100_000
    out = run(http["get"](ctx(tmp_path, allowPrivate=True), {"url": f"{base_url}/ok"}))
    assert out["body"] == "ok" and out["truncated"] is False
