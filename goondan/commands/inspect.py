"""``goondan inspect workspace`` and ``goondan inspect instance KEY``: read-only views of state.

Nothing here takes an instance lock or writes a file, so inspecting a running instance is safe.
Every line printed passes through :func:`goondan.secrets.mask`. With ``--store postgresql://…``
the views of :mod:`goondan.commands.store_views` read that store through the storage contract.
"""

from __future__ import annotations

import abc
import json
import os
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import click

from goondan.commands.common import (
    get_globals,
    register_bundle_secrets,
    store_option,
    style,
    workspace_bundle,
)
from goondan.commands.trace import print_instance_traces, trace
from goondan.conversation.codec import decode_record
from goondan.conversation.messages import Message, MessageEvent
from goondan.errors import Diagnostic, WorkspaceError
from goondan.secrets import mask, mask_cut
from goondan.workspace.catalog import (
    InstanceInfo,
    iter_instances,
    iter_messages,
    read_pending_events,
    read_tail_messages,
    select_instances,
)
from goondan.workspace.files import count_lines, iter_lines_backwards, read_bytes

__all__ = [
    "InstanceView", "format_event", "format_message", "human_size", "inspect", "print_view",
    "short_time",
]

_OUTPUT_LIMIT = 600
_POLL_SECONDS = 0.2


def echo(text: str = "", *, err: bool = False) -> None:
    """Print one masked line."""
    click.echo(mask(text), err=err)


def echo_json(value: Any) -> None:
    """Print masked compact-but-readable JSON."""
    click.echo(mask(json.dumps(value, ensure_ascii=False, indent=2)))


def human_size(size: int) -> str:
    """``1.2 MB`` style sizes."""
    value = float(size)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1024 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{size} B"  # pragma: no cover


def short_time(value: str | None) -> str:
    """``2026-03-04T08:05:09.120Z`` → ``2026-03-04 08:05:09``."""
    if not value:
        return "-"
    return value.replace("T", " ")[:19]


def _clip(text: str, limit: int = _OUTPUT_LIMIT) -> str:
    # Masked before the cut: a secret across the limit would otherwise keep its start.
    text = mask(text)
    return (
        text
        if len(text) <= limit
        else mask_cut(text[:limit]) + f"... ({len(text) - limit} more chars)"
    )


def _compact(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _source(message: Message) -> str:
    source = message.source
    if source.type == "assistant" and source.step_id:
        return f"assistant step {source.step_id}"
    if source.type == "tool":
        return f"tool {source.tool_name} ({source.tool_call_id})"
    if source.type == "extension":
        return f"extension {source.extension_name}"
    return source.type


def _flags(message: Message) -> str:
    flags = [k for k, v in message.metadata.items() if v is True]
    others = [k for k, v in message.metadata.items() if v is not True]
    out = " ".join(f"[{f}]" for f in flags)
    if others:
        out += (" " if out else "") + "meta: " + ", ".join(others)
    return out


def format_message(number: int | None, message: Message, *, color: bool = False) -> list[str]:
    """A readable transcript entry: header, text, tool calls with arguments, tool results."""
    role = style(message.role or "?", color, bold=True,
                 fg={"user": "green", "assistant": "cyan", "tool": "yellow"}.get(message.role))
    head = f"#{number} " if number is not None else ""
    header = f"{head}{short_time(message.created_at)}  {role}  <{_source(message)}>  {message.id}"
    flags = _flags(message)
    lines = [header + (f"  {flags}" if flags else "")]
    content = message.data.get("content")
    parts = [{"type": "text", "text": content}] if isinstance(content, str) else content or []
    for part in parts if isinstance(parts, list) else []:
        if not isinstance(part, dict):
            continue
        kind = part.get("type")
        if kind == "text":
            lines.extend("    " + line for line in _clip(str(part.get("text", ""))).splitlines())
        elif kind == "tool-call":
            args = part.get("input", part.get("args"))
            lines.append(f"    -> call {part.get('toolName')} ({part.get('toolCallId')}) "
                         f"{_clip(_compact(args))}")
        elif kind == "tool-result":
            output = part.get("output")
            status = (
                "error" if isinstance(output, dict) and output.get("type") == "error-json" else "ok"
            )
            value = output.get("value") if isinstance(output, dict) else output
            lines.append(f"    <- result {part.get('toolName')} ({part.get('toolCallId')}) "
                         f"{status}: {_clip(_compact(value))}")
        else:
            lines.append(f"    [{kind}] {_clip(_compact(part))}")
    return lines


def format_event(event: MessageEvent) -> str:
    """One pending event as a single line."""
    turn = event.extra.get("turnId")
    prefix = f"[{turn}] " if turn else ""
    if event.type == "append" and event.message is not None:
        m = event.message
        return f"{prefix}append  {m.id} {m.role}: {_clip(m.text, 120)}"
    if event.type == "replace" and event.message is not None:
        return f"{prefix}replace {event.target_id} -> {event.message.id} {event.message.role}: " \
               f"{_clip(event.message.text, 120)}"
    if event.type == "remove":
        return f"{prefix}remove  {event.target_id}"
    return f"{prefix}{event.type}"


def _diag_line(diagnostic: Diagnostic) -> str:
    where = f" ({diagnostic.path})" if diagnostic.path else ""
    return f"{diagnostic.severity}: [{diagnostic.code}] {diagnostic.message}{where}"


def _extension_states(info: InstanceInfo) -> dict[str, Any]:
    states: dict[str, Any] = {}
    try:
        files = sorted(info.paths.extensions_dir.glob("*.json"))
    except OSError:
        return states
    for path in files:
        data = read_bytes(path)
        try:
            states[path.stem] = json.loads(data) if data else None
        except (UnicodeDecodeError, ValueError):
            states[path.stem] = {"error": f"invalid JSON in {path}"}
    return states


@click.group("inspect")
def inspect() -> None:
    """Inspect workspaces, instances, conversations and traces (read-only)."""


inspect.add_command(trace)


@inspect.command("workspace")
@click.option("--state-root", type=click.Path(), default=None, help="State root to inspect.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@store_option
def workspace(state_root: str | None, as_json: bool, store: str | None) -> None:
    """Every workspace and instance under the state root (ours and the reference runtime's)."""
    from goondan.commands.store_read import jsonl_root, opened_store, postgres_location

    opts = get_globals()
    location = postgres_location(store)
    if location is not None:
        from goondan.commands.store_views import print_workspaces

        with opened_store(location) as backend:
            print_workspaces(backend, location.display, as_json=as_json, color=opts.color)
        return
    root = opts.resolve_state_root(jsonl_root(store, state_root))
    if as_json:
        grouped: dict[str, list[dict[str, Any]]] = {}
        for info in iter_instances(root):
            grouped.setdefault(info.workspace_id, []).append(info.to_dict())
        echo_json({"stateRoot": str(root), "workspaces": [
            {"workspaceId": ws, "instances": rows} for ws, rows in grouped.items()]})
        return
    if not root.exists():
        echo(f"State root {root} does not exist yet (no workspaces).")
        return
    echo(f"State root: {root}")
    current: str | None = None
    count = 0
    for info in iter_instances(root):
        if info.workspace_id != current:
            current = info.workspace_id
            echo("")
            echo(style(f"workspace {current}", opts.color, bold=True))
            echo(f"  {'INSTANCE KEY':<32} {'AGENT':<16} {'STATUS':<11} {'MESSAGES':>8} "
                 f"{'PENDING':>7}  {'UPDATED':<19} {'SIZE':>9}")
        count += 1
        if info.error:
            echo(f"  {info.dir_name:<32} {'?':<16} {'invalid':<11} {info.error}")
            continue
        echo(f"  {info.instance_key:<32} {info.agent_name or '-':<16} {info.status:<11} "
             f"{info.message_count():>8} {info.pending_events():>7}  "
             f"{short_time(info.updated_at):<19} {human_size(info.size_bytes()):>9}")
    if not count:
        echo("No workspaces found.")


@inspect.command("instance")
@click.argument("key")
@click.option("--agent", "-a", default=None, help="Agent name (when several agents share KEY).")
@click.option("--workspace", "workspace_id", default=None, help="Workspace id to look in.")
@click.option("--messages", "show_messages", is_flag=True, help="Only the transcript.")
@click.option("--events", "show_events", is_flag=True, help="Only pending events.")
@click.option("--state", "show_state", is_flag=True, help="Only extension states.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option("--follow", "-f", is_flag=True, help="Keep printing new events until Ctrl-C.")
@click.option("--limit", "-n", type=click.IntRange(min=0), default=50, show_default=True,
              help="Show the last N messages (0 = all).")
@click.option("--raw", is_flag=True, help="Print the stored JSONL records as they are.")
@click.option("--traces", "show_traces", is_flag=True,
              help="Only the recent traces this instance took part in (see 'inspect trace').")
@click.option("--state-root", type=click.Path(), default=None, help="State root to inspect.")
@store_option
def instance(key: str, agent: str | None, workspace_id: str | None, show_messages: bool,
             show_events: bool, show_state: bool, as_json: bool, follow: bool, limit: int,
             raw: bool, show_traces: bool, state_root: str | None, store: str | None) -> None:
    """Transcript, pending events and extension states of instance KEY."""
    from goondan.commands.store_read import jsonl_root, postgres_location

    opts = get_globals()
    location = postgres_location(store)
    if location is not None:
        _instance_in_store(location, key, agent, workspace_id,
                           {"messages": show_messages, "events": show_events, "state": show_state},
                           as_json=as_json, raw=raw, limit=limit, follow=follow,
                           traces=show_traces, root=opts.resolve_state_root(state_root))
        return
    root = opts.resolve_state_root(jsonl_root(store, state_root))
    info = select_instances(root, key, agent=agent, workspace_id=workspace_id,
                            allow_many=False)[0]
    # stored tool results may hold a key a tool printed: mask the instance's own bundle's secrets
    # (whatever the current directory is) and those of every recorded workspace
    own = workspace_bundle(root, info.workspace_id)
    register_bundle_secrets(root, bundles=(own,) if own is not None else ())
    if info.error:
        raise WorkspaceError(f"{info.paths.dir}: {info.error}", code="E_WORKSPACE_CORRUPT",
                             location=str(info.paths.metadata),
                             suggestion="fix or remove metadata.json (keep a copy first)")
    if show_traces:
        print_instance_traces(root, info, as_json=as_json, limit=limit)
        return
    sections = {"messages": show_messages, "events": show_events, "state": show_state}
    if not any(sections.values()):
        sections = dict.fromkeys(sections, True)
    print_view(_StateRootView(info), sections, as_json=as_json, raw=raw, limit=limit,
               color=opts.color)
    if follow:
        _follow(info, as_json=as_json, raw=raw)


def _instance_in_store(location: Any, key: str, agent: str | None, workspace_id: str | None,
                       chosen: dict[str, bool], *, as_json: bool, raw: bool, limit: int,
                       follow: bool, traces: bool, root: Path) -> None:
    """``inspect instance --store postgresql://…`` (:mod:`goondan.commands.store_views`)."""
    from goondan.commands.store_read import find_stored, opened_store
    from goondan.commands.store_views import print_instance

    register_bundle_secrets(root)
    with opened_store(location) as backend:
        if traces:  # from the store's span table
            [found] = find_stored(backend, location.display, key, agent=agent,
                                  workspace_id=workspace_id, allow_many=False)
            print_instance_traces(root, found, as_json=as_json, limit=limit, backend=backend)
            return
        print_instance(backend, location.display, key, agent=agent, workspace_id=workspace_id,
                       sections=chosen if any(chosen.values()) else dict.fromkeys(chosen, True),
                       as_json=as_json, raw=raw, limit=limit, follow=follow,
                       color=get_globals().color)


class InstanceView(abc.ABC):
    """One instance as ``inspect instance`` shows it, wherever it is stored: the state root
    (:class:`_StateRootView`) or a store (:class:`goondan.commands.store_views.StoredView`);
    :func:`print_view` prints it."""

    def __init__(self, label: str, workspace_id: str, status: str,
                 updated_at: str | None) -> None:
        self.label = label
        self.workspace_id = workspace_id
        self.status = status
        self.updated_at = updated_at

    @abc.abstractmethod
    def total(self) -> int:
        """How many committed messages it has."""

    @abc.abstractmethod
    def row(self) -> dict[str, Any]:
        """The ``instance`` object of ``--json``."""

    @abc.abstractmethod
    def messages(self, limit: int) -> Iterable[tuple[int, Message]]:
        """The last ``limit`` committed messages (0: all), numbered from 1, oldest first."""

    @abc.abstractmethod
    def pending(self) -> tuple[list[MessageEvent], list[Diagnostic]]:
        """The pending events and what was wrong reading them."""

    @abc.abstractmethod
    def extensions(self) -> dict[str, Any]:
        """Each extension's state by name."""

    @abc.abstractmethod
    def raw_messages(self, limit: int) -> Iterable[str]:
        """The stored records of :meth:`messages`."""

    @abc.abstractmethod
    def raw_events(self) -> Iterable[str]:
        """The stored records of the pending events."""


class _StateRootView(InstanceView):
    def __init__(self, info: InstanceInfo) -> None:
        super().__init__(info.label, info.workspace_id, info.status, info.updated_at)
        self.info = info

    def total(self) -> int:
        return count_lines(self.info.paths.base)

    def row(self) -> dict[str, Any]:
        return self.info.to_dict()

    def messages(self, limit: int) -> Iterator[tuple[int, Message]]:
        paths = self.info.paths
        if limit == 0:
            for number, (_, message) in enumerate(iter_messages(paths), start=1):
                yield number, message
            return
        tail = read_tail_messages(paths, limit)
        first = max(1, count_lines(paths.base) - len(tail) + 1)
        for offset, (_, message) in enumerate(tail):
            yield first + offset, message

    def pending(self) -> tuple[list[MessageEvent], list[Diagnostic]]:
        return read_pending_events(self.info.paths)

    def extensions(self) -> dict[str, Any]:
        return _extension_states(self.info)

    def raw_messages(self, limit: int) -> Iterator[str]:
        base = self.info.paths.base
        if limit == 0:
            with base.open("rb") as handle:
                for line in handle:
                    yield line.decode("utf-8", "replace").rstrip("\n")
            return
        lines: list[bytes] = []
        for _, line in iter_lines_backwards(base):
            lines.append(line)
            if len(lines) >= limit:
                break
        for line in reversed(lines):
            yield line.decode("utf-8", "replace")

    def raw_events(self) -> Iterator[str]:
        for line in read_bytes(self.info.paths.events).splitlines():
            if line.strip():
                yield line.decode("utf-8", "replace")


def print_view(view: InstanceView, sections: dict[str, bool], *, as_json: bool, raw: bool,
               limit: int, color: bool) -> None:
    """``inspect instance``'s chosen ``sections`` of ``view``: text, ``--json`` or ``--raw``."""
    if as_json:
        _print_json(view, sections, limit)
    elif raw:
        _print_raw(view, sections, limit)
    else:
        _print_text(view, sections, limit, color)


def _print_text(view: InstanceView, sections: dict[str, bool], limit: int, color: bool) -> None:
    total = view.total()
    echo(style(f"instance {view.label}", color, bold=True)
         + f"  (workspace {view.workspace_id}, status {view.status}, {total} messages, "
         f"updated {short_time(view.updated_at)})")
    if sections["messages"]:
        shown = total if limit == 0 else min(limit, total)
        echo(f"-- messages (last {shown} of {total}) --" if shown < total else "-- messages --")
        for number, message in view.messages(limit):
            for line in format_message(number, message, color=color):
                echo(line)
    if sections["events"]:
        events, diagnostics = view.pending()
        echo(f"-- pending events: {len(events)} --")
        for event in events:
            echo("  " + format_event(event))
        for diagnostic in diagnostics:
            echo("  " + _diag_line(diagnostic))
    if sections["state"]:
        states = view.extensions()
        echo(f"-- extension states: {len(states)} --")
        for name, value in states.items():
            echo(f"  {name}: {_clip(_compact(value))}")


def _print_json(view: InstanceView, sections: dict[str, bool], limit: int) -> None:
    out: dict[str, Any] = {"instance": view.row()}
    if sections["messages"]:
        out["messages"] = [m.to_dict() for _, m in view.messages(limit)]
    if sections["events"]:
        events, diagnostics = view.pending()
        out["pendingEvents"] = [e.to_dict() for e in events]
        out["diagnostics"] = [d.to_dict() for d in diagnostics]
    if sections["state"]:
        out["extensions"] = view.extensions()
    echo_json(out)


def _print_raw(view: InstanceView, sections: dict[str, bool], limit: int) -> None:
    if sections["messages"]:
        for line in view.raw_messages(limit):
            echo(line)
    if sections["events"]:
        for line in view.raw_events():
            echo(line)
    if sections["state"]:
        for name, value in view.extensions().items():
            echo(json.dumps({"extension": name, "state": value}, ensure_ascii=False))


def _follow(info: InstanceInfo, *, as_json: bool, raw: bool) -> None:
    """Tail ``events.jsonl``: print complete new records; note when a commit empties it."""
    path: Path = info.paths.events
    offset = path.stat().st_size if path.exists() else 0
    pending = b""
    if not as_json:
        echo("-- following events (Ctrl-C to stop) --")
    while True:
        try:
            size = os.stat(path).st_size
        except FileNotFoundError:
            size = 0
        if size < offset:  # the turn was committed and the file emptied
            offset, pending = 0, b""
            if not as_json and not raw:
                echo("-- turn committed (events folded into base.jsonl) --")
        if size > offset:
            with path.open("rb") as handle:
                handle.seek(offset)
                chunk = handle.read(size - offset)
            offset += len(chunk)
            lines = (pending + chunk).split(b"\n")
            pending = lines.pop()
            for line in lines:
                if line.strip():
                    _print_follow_line(line, path, as_json=as_json, raw=raw)
        time.sleep(_POLL_SECONDS)


def _print_follow_line(line: bytes, path: Path, *, as_json: bool, raw: bool) -> None:
    if raw or as_json:
        echo(line.decode("utf-8", "replace"))
        return
    try:
        event = decode_record(line, MessageEvent.from_dict, file=str(path), line_no=0)
    except WorkspaceError:
        echo(f"  (unreadable event record: {_clip(line.decode('utf-8', 'replace'), 120)})")
        return
    echo("  " + format_event(event))
