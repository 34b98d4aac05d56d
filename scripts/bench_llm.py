"""Benchmarks for the model adapters (issue 5): request build + response parse, SSE parsing.

Prints per-operation figures and the ratio against each target (ratio < 1 means within target):

* per provider, building the request for a 1,000-message conversation (``to_wire`` + JSON
  encoding, as the transport sends it) plus decoding and parsing a reply with two tool calls
  (``json.loads`` + ``from_wire``) — target < 5 ms;
* SSE parsing throughput of :class:`goondan.llm.sse.SseParser` on OpenAI-style chunk events
  fed in 16 KiB reads — target > 50 MB/s (the ratio is target / measured);
* for information: the same stream through the OpenAI adapter's accumulator (parse + JSON
  decode + deltas), in MB/s.

No network is used. Run: ``.venv/bin/python scripts/bench_llm.py`` (exit 1 when a target is missed).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from typing import Any

from goondan.llm.base import ModelRequest, ModelSpec
from goondan.llm.provider import HttpModel
from goondan.llm.registry import create_model
from goondan.llm.sse import SseParser
from goondan.types import ToolCatalogItem

BUILD_TARGET_MS = 5.0
SSE_TARGET_MBS = 50.0
ROUNDS = 7


def best(fn: Callable[[], Any], n: int) -> float:
    """Best-of-ROUNDS mean seconds per call."""
    fn()
    samples = []
    for _ in range(ROUNDS):
        start = time.perf_counter()
        for _ in range(n):
            fn()
        samples.append((time.perf_counter() - start) / n)
    return min(samples)


def conversation(n: int = 1000) -> list[dict[str, Any]]:
    """User question, assistant tool call, tool result, assistant answer — repeated."""
    out: list[dict[str, Any]] = []
    i = 0
    while len(out) < n:
        call_id = f"call_{i}"
        out.append(
            {"role": "user", "content": f"Question {i}: what is in notes/{i}.txt and the time?"}
        )
        out.append(
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Let me look."},
                    {
                        "type": "tool-call",
                        "toolCallId": call_id,
                        "toolName": "fs__read",
                        "input": {"path": f"notes/{i}.txt"},
                    },
                ],
            }
        )
        out.append(
            {
                "role": "tool",
                "content": [
                    {
                        "type": "tool-result",
                        "toolCallId": call_id,
                        "toolName": "fs__read",
                        "output": {
                            "type": "json",
                            "value": {"content": "lorem ipsum dolor sit amet " * 4, "bytes": 108},
                        },
                    }
                ],
            }
        )
        out.append(
            {"role": "assistant", "content": f"The file says lorem ipsum; it is {i % 24}:00."}
        )
        i += 1
    return out[:n]


TOOLS = [
    ToolCatalogItem(
        "fs__read", "Read a file.", {"type": "object", "properties": {"path": {"type": "string"}}}
    ),
    ToolCatalogItem(
        "clock__now", "Time.", {"type": "object", "properties": {"tz": {"type": "string"}}}
    ),
]

REPLIES: dict[str, dict[str, Any]] = {
    "openai": {
        "id": "c",
        "model": "m",
        "choices": [
            {
                "index": 0,
                "finish_reason": "tool_calls",
                "message": {
                    "role": "assistant",
                    "content": "Checking.",
                    "tool_calls": [
                        {
                            "id": "a",
                            "type": "function",
                            "function": {"name": "fs__read", "arguments": '{"path":"x"}'},
                        },
                        {
                            "id": "b",
                            "type": "function",
                            "function": {"name": "clock__now", "arguments": '{"tz":"UTC"}'},
                        },
                    ],
                },
            }
        ],
        "usage": {"prompt_tokens": 9000, "completion_tokens": 40, "total_tokens": 9040},
    },
    "anthropic": {
        "id": "m",
        "type": "message",
        "role": "assistant",
        "model": "m",
        "stop_reason": "tool_use",
        "content": [
            {"type": "text", "text": "Checking."},
            {"type": "tool_use", "id": "a", "name": "fs__read", "input": {"path": "x"}},
            {"type": "tool_use", "id": "b", "name": "clock__now", "input": {"tz": "UTC"}},
        ],
        "usage": {"input_tokens": 9000, "output_tokens": 40},
    },
    "google": {
        "candidates": [
            {
                "content": {
                    "role": "model",
                    "parts": [
                        {"text": "Checking."},
                        {"functionCall": {"name": "fs__read", "args": {"path": "x"}}},
                        {"functionCall": {"name": "clock__now", "args": {"tz": "UTC"}}},
                    ],
                },
                "finishReason": "STOP",
            }
        ],
        "usageMetadata": {
            "promptTokenCount": 9000,
            "candidatesTokenCount": 40,
            "totalTokenCount": 9040,
        },
        "responseId": "r",
    },
}


def bench_round_trip(provider: str) -> float:
    model = create_model(
        ModelSpec(provider=provider, model="bench-model", api_key="bench-key-0000")
    )
    assert isinstance(model, HttpModel)
    request = ModelRequest(messages=conversation(), tools=TOOLS, system="You are a bench.",
                           params={"temperature": 0.2, "maxTokens": 512})
    reply = json.dumps(REPLIES[provider]).encode()

    def once() -> None:
        body = model.to_wire(request, stream=False)
        json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
        model.from_wire(json.loads(reply), request=request)

    return best(once, 50) * 1000


def openai_stream(n_events: int = 20_000) -> bytes:
    events = []
    for i in range(n_events):
        chunk = {"id": "chatcmpl-abc123", "object": "chat.completion.chunk", "created": 1700000000,
                 "model": "gpt-4o-mini", "choices": [{"index": 0, "delta": {"content": f"tok{i} "},
                                                       "finish_reason": None}]}
        events.append(b"data: " + json.dumps(chunk).encode() + b"\n\n")
    events.append(b"data: [DONE]\n\n")
    return b"".join(events)


def bench_sse(raw: bytes, read_size: int = 16 * 1024) -> float:
    reads = [raw[i:i + read_size] for i in range(0, len(raw), read_size)]

    def once() -> None:
        parser = SseParser()
        for piece in reads:
            parser.feed(piece)
        parser.close()

    return len(raw) / best(once, 3) / 1e6


def bench_accumulate(raw: bytes, read_size: int = 16 * 1024) -> float:
    model = create_model(ModelSpec(provider="openai", model="m", api_key="bench-key-0000"))
    assert isinstance(model, HttpModel)
    reads = [raw[i:i + read_size] for i in range(0, len(raw), read_size)]

    def once() -> None:
        parser = SseParser()
        stream = model.new_stream()
        for piece in reads:
            for event in parser.feed(piece):
                stream.feed(event)
        stream.finish()

    return len(raw) / best(once, 3) / 1e6


def main() -> int:
    ok = True
    print(f"{'operation':<58}{'figure':>12}{'target':>12}{'ratio':>8}")
    for provider in ("openai", "anthropic", "google"):
        ms = bench_round_trip(provider)
        ratio = ms / BUILD_TARGET_MS
        ok &= ratio < 1
        print(f"{provider + ': build + parse, 1,000-message conversation':<58}{ms:>9.2f} ms"
              f"{BUILD_TARGET_MS:>9.1f} ms{ratio:>8.2f}")
    raw = openai_stream()
    mbs = bench_sse(raw)
    ratio = SSE_TARGET_MBS / mbs
    ok &= ratio < 1
    print(f"{'SSE parser throughput (OpenAI chunks, 16 KiB reads)':<58}{mbs:>7.1f} MB/s"
          f"{SSE_TARGET_MBS:>7.0f} MB/s{ratio:>8.2f}")
    info = "  (info) SSE + OpenAI accumulator (JSON decode, deltas)"
    print(f"{info:<58}{bench_accumulate(raw):>7.1f} MB/s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
