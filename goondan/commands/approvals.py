"""``goondan approvals list|approve|deny|cancel``: answer the tool calls that wait for a person
(``cancel``: cancel the parked turn, denying every pending approval of it).

The decision is written into the workspace's approval store
(:class:`~goondan.workspace.approvals.ApprovalStore`, or with ``--store postgresql://…`` the
approval index of that store, where a swarm running on it reads it), which works whether the
swarm runs or not; a running orchestrator is then told over its control socket
(``{"command": "approval", "id"}``) so the parked turn resumes now. A swarm that is stopped
applies stored decisions when it starts (docs/approvals.md).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

from goondan.commands.common import bundle_option, get_globals, store_option
from goondan.secrets import mask

__all__ = ["approval_stores", "approvals", "decide_approval", "find_approval", "local_user"]

_COLUMNS = (
    ("ID", "id", 28),
    ("STATUS", "status", 9),
    ("AGENT", "agent", 14),
    ("INSTANCE KEY", "instanceKey", 18),
    ("TOOL", "tool", 24),
    ("REQUESTED", "requestedAt", 0),
)


@contextlib.contextmanager
def _backend(store: str | None) -> Iterator[Any]:
    """The PostgreSQL store given with ``--store`` (None for the JSONL state root)."""
    from goondan.commands.store_read import opened_store, postgres_location

    location = postgres_location(store)
    if location is None:
        yield None
        return
    with opened_store(location) as backend:
        yield backend


def _stores(state_root: Path, bundle: str | None, backend: Any = None) -> list[tuple[str, Any]]:
    """(workspace id, approval index) to look in: the bundle's workspace, else every one."""
    from goondan.workspace.approvals import ApprovalStore
    from goondan.workspace.paths import StateLayout

    def index(workspace: str) -> Any:
        return ApprovalStore(state_root, workspace) if backend is None else \
            backend.approvals(workspace)

    if bundle is not None:
        from goondan.config.cache import load_bundle_cached
        from goondan.workspace.paths import workspace_id_for

        loaded = load_bundle_cached(Path(bundle), state_root=state_root)
        workspace = workspace_id_for(loaded.root, loaded.package_name)
        return [(workspace, index(workspace))]
    if backend is not None:
        return [(workspace, index(workspace)) for workspace in backend.workspaces()]
    workspaces = StateLayout(state_root).workspaces_dir
    names = (
        sorted(p.name for p in workspaces.iterdir() if p.is_dir()) if workspaces.is_dir() else []
    )
    return [(name, index(name)) for name in names]


def approval_stores(state_root: Path, bundle: str | None, backend: Any = None) -> list[Any]:
    """The approval stores to look in: the bundle's workspace, else every workspace."""
    return [index for _, index in _stores(state_root, bundle, backend)]


def find_approval(state_root: Path, bundle: str | None, approval: str,
                  backend: Any = None) -> tuple[Any, str]:
    """The store holding ``approval`` and its workspace id (``E_APPROVAL_NOT_FOUND`` if none)."""
    from goondan.errors import UsageError

    for workspace, store in _stores(state_root, bundle, backend):
        if store.get(approval) is not None:
            return store, workspace
    if backend is None:
        raise UsageError(f"no approval {approval!r} under {state_root}",
                         code="E_APPROVAL_NOT_FOUND",
                         suggestion="'goondan approvals list --all' shows every approval; check "
                         "--state-root and --bundle")
    raise UsageError(f"no approval {approval!r} in {backend.db.where}",
                     code="E_APPROVAL_NOT_FOUND",
                     suggestion="'goondan approvals list --all --store ...' shows every approval "
                     "of the store; check --store and --bundle")


def _root(options: Any, store: str | None, state_root: str | None) -> Path:
    from goondan.commands.store_read import jsonl_root

    return Path(options.resolve_state_root(jsonl_root(store, state_root)))


@click.group("approvals", invoke_without_command=True)
@click.pass_context
def approvals(ctx: click.Context) -> None:
    """List and decide tool calls waiting for approval (bare `approvals` = list)."""
    if ctx.invoked_subcommand is None:
        ctx.invoke(list_approvals)


@approvals.command("list")
@bundle_option(
    type=click.Path(exists=True), help="Only this bundle's workspace [default: every workspace]."
)
@click.option("--all", "show_all", is_flag=True, help="Also decided and expired approvals.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (a list of approvals).")
@click.option("--state-root", type=click.Path(), default=None, help="State root to use.")
@store_option
def list_approvals(bundle: str | None = None, show_all: bool = False, as_json: bool = False,
                   state_root: str | None = None, store: str | None = None) -> None:
    """List approvals (pending ones unless --all), oldest first."""
    options = get_globals()
    root = _root(options, store, state_root)
    with _backend(store) as backend:
        rows = [a.to_dict() for _, index in _stores(root, bundle or options.bundle, backend)
                for a in index.list(status=None if show_all else "pending")]
    if as_json or options.json_errors:
        click.echo(mask(json.dumps(rows, ensure_ascii=False, indent=2)))
        return
    if not rows:
        click.echo("No approvals waiting." if not show_all else "No approvals.")
        return
    click.echo("  ".join(h.ljust(w) if w else h for h, _, w in _COLUMNS))
    for row in rows:
        cells = [str(row.get(k) if row.get(k) is not None else "-") for _, k, _ in _COLUMNS]
        click.echo(
            mask(
                "  ".join(
                    c.ljust(w) if w else c for c, (_, _, w) in zip(cells, _COLUMNS, strict=True)
                )
            )
        )
        args = json.dumps(row.get("args"), ensure_ascii=False)
        click.echo(mask(f"    args: {args if len(args) <= 200 else args[:197] + '...'}"))
        if row.get("reason"):
            click.echo(mask(f"    reason: {row['reason']}"))


def _decide(approval: str, *, approve: bool, args: str | None, note: str | None, reason: str | None,
            bundle: str | None, state_root: str | None, as_json: bool,
            store: str | None = None) -> None:
    with _backend(store) as backend:
        _decide_in(approval, approve=approve, args=args, note=note, reason=reason, bundle=bundle,
                   root=_root(get_globals(), store, state_root), as_json=as_json,
                   backend=backend)


def _decide_in(approval: str, *, approve: bool, args: str | None, note: str | None,
               reason: str | None, bundle: str | None, root: Path, as_json: bool,
               backend: Any) -> None:
    from goondan.errors import UsageError

    options = get_globals()
    edited: dict[str, Any] | None = None
    if args is not None:
        try:
            edited = json.loads(args)
        except ValueError as exc:
            raise UsageError(
                f"--args is not valid JSON: {exc}",
                code="E_APPROVAL_ARGS",
                suggestion="""pass a JSON object, e.g. --args '{"path": "a.txt"}'""",
            ) from None
        if not isinstance(edited, dict):
            raise UsageError(
                "--args must be a JSON object (the tool's arguments)",
                code="E_APPROVAL_ARGS",
                suggestion="""pass a JSON object, e.g. --args '{"path": "a.txt"}'""",
            )
    found, mine, notified, _ = decide_approval(
        root, approval, approve=approve, by=local_user(), via="cli", args=edited, note=note,
        reason=reason, bundle=bundle or options.bundle, backend=backend)
    row = found.to_dict()
    if as_json or options.json_errors:
        click.echo(
            mask(json.dumps({**row, "decided": mine, "notified": notified}, ensure_ascii=False))
        )
        return
    if mine:
        click.echo(
            f"{approval}: {found.status}"
            + (
                " (the running swarm resumes the turn)"
                if notified
                else " (applied when the swarm runs)"
            )
        )
    else:
        click.echo(f"{approval} was already {found.status}"
                   + (f" by {row['decidedBy']} via {row['via']}" if row.get("decidedBy") else "")
                   + "; nothing changed")


def decide_approval(state_root: Path, approval: str, *, approve: bool, by: str, via: str,
                    args: dict[str, Any] | None = None, note: str | None = None,
                    reason: str | None = None, bundle: str | None = None,
                    backend: Any = None) -> tuple[Any, bool, bool, str]:
    """Record a decision and tell the running orchestrators (``approvals approve|deny`` and the
    studio): ``(approval, decided by this call, a running swarm resumes it, workspace id)``.
    ``E_APPROVAL_NOT_FOUND`` for an unknown id; edited ``args`` are checked first."""
    store, workspace = find_approval(state_root, bundle, approval, backend)
    if args is not None:
        _check_args(state_root, workspace, store.get(approval), args)
    found, mine = store.decide(
        approval, approve=approve, by=by, via=via, args=args, note=note, reason=reason
    )
    notified = _notify(state_root, approval)
    return found, mine, notified, workspace


def local_user() -> str:
    """The local user name (``unknown`` when the system has none for this uid)."""
    import getpass

    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


def _check_args(state_root: Path, workspace: str, found: Any, edited: dict[str, Any]) -> None:
    """Validate edited arguments against the tool's schema when the bundle can be read (the
    tool executor checks them again before the call runs)."""
    from goondan.errors import UsageError
    from goondan.tools.schema import validate_args
    from goondan.workspace.files import read_json_file
    from goondan.workspace.paths import StateLayout
    from goondan.workspace.record import RECORD_FILE

    request = found.request if found is not None else {}
    try:
        record = read_json_file(StateLayout(state_root).workspace_dir(workspace) / RECORD_FILE)
        from goondan.config.cache import load_bundle_cached

        loaded = load_bundle_cached(Path(record["bundleRoot"]), state_root=state_root)
        spec = loaded.agent_spec(str(request.get("agent")))
    except Exception:  # no record, the bundle moved or no longer loads: the executor checks
        return
    schema = next((export.parameters for binding in spec.tools for export in binding.exports
                   if f"{binding.name}__{export.name}" == request.get("tool")), None)
    if schema is None:
        return
    problem = validate_args(schema, edited)
    if problem is not None:
        raise UsageError(
            f"--args does not match the parameters of {request.get('tool')}: {problem}",
            code="E_APPROVAL_ARGS",
            suggestion="'goondan approvals list' shows the arguments the model gave; edit those",
        )


def _notify(state_root: Path, approval: str) -> bool:
    """Tell every running orchestrator; True when one of them holds the approval."""
    import asyncio

    from goondan.errors import GoondanError
    from goondan.ipc.controlwire import send_control
    from goondan.swarm.state import running_records

    applied = False
    for active in running_records(state_root):
        if not active.control_socket:
            continue
        try:
            answer = asyncio.run(
                send_control(
                    Path(active.control_socket),
                    {"command": "approval", "id": approval},
                    timeout_s=10.0,
                )
            )
        except GoondanError:
            continue
        applied = applied or bool(answer.get("ok") and answer.get("applied"))
    return applied


_COMMON = [
    bundle_option(
        type=click.Path(exists=True),
        help="Look only in this bundle's workspace [default: every workspace].",
    ),
    click.option("--json", "as_json", is_flag=True, help="Print the approval as JSON."),
    click.option("--state-root", type=click.Path(), default=None, help="State root to use."),
    store_option,
]


def _with_common(func: Any) -> Any:
    for option in reversed(_COMMON):
        func = option(func)
    return func


@approvals.command("approve")
@click.argument("approval_id")
@click.option(
    "--args", "args", default=None, help="Run with these arguments instead (a JSON object)."
)
@click.option("--note", default=None, help="A note kept with the decision.")
@_with_common
def approve(approval_id: str, args: str | None, note: str | None, bundle: str | None, as_json: bool,
            state_root: str | None, store: str | None) -> None:
    """Approve APPROVAL_ID: the tool call runs (a second decision changes nothing)."""
    _decide(approval_id, approve=True, args=args, note=note, reason=None, bundle=bundle,
            state_root=state_root, as_json=as_json, store=store)


@approvals.command("deny")
@click.argument("approval_id")
@click.option("--reason", default=None, help="Why; the model sees it with E_APPROVAL_DENIED.")
@_with_common
def deny(approval_id: str, reason: str | None, bundle: str | None, as_json: bool,
         state_root: str | None, store: str | None) -> None:
    """Deny APPROVAL_ID: the tool call does not run; the model gets E_APPROVAL_DENIED."""
    _decide(approval_id, approve=False, args=None, note=None, reason=reason, bundle=bundle,
            state_root=state_root, as_json=as_json, store=store)


CANCELLED_REASON = "the turn was cancelled"


@approvals.command("cancel")
@click.argument("approval_id")
@click.option("--reason", default=None, help=f"Why [default: {CANCELLED_REASON}].")
@_with_common
def cancel(approval_id: str, reason: str | None, bundle: str | None, as_json: bool,
           state_root: str | None, store: str | None) -> None:
    """Cancel the parked turn of APPROVAL_ID: every pending approval of that turn is denied;
    the turn resumes with E_APPROVAL_DENIED for those calls and ends."""
    with _backend(store) as backend:
        _cancel(approval_id, reason, bundle, as_json, _root(get_globals(), store, state_root),
                backend)


def _cancel(approval_id: str, reason: str | None, bundle: str | None, as_json: bool, root: Path,
            backend: Any) -> None:
    options = get_globals()
    store, _ = find_approval(root, bundle or options.bundle, approval_id, backend)
    request = store.get(approval_id).request
    turn = [a for a in store.list(status="pending", agent=request.get("agent"),
                                  instance_key=request.get("instanceKey"))
            if a.request.get("turnId") == request.get("turnId")]
    user, denied = local_user(), []
    for found in turn:
        decided, mine = store.decide(found.id, approve=False, by=user, via="cli",
                                     reason=reason or CANCELLED_REASON)
        if mine:
            denied.append(decided.id)
    notified = _notify(root, denied[0]) if denied else False
    if as_json or options.json_errors:
        click.echo(json.dumps({"turnId": request.get("turnId"), "denied": denied,
                               "notified": notified}))
    elif not denied:
        click.echo(f"turn {request.get('turnId')} has no pending approval; nothing changed")
    else:
        click.echo(f"turn {request.get('turnId')} cancelled: denied {', '.join(denied)}"
                   + (" (the running swarm resumes the turn)" if notified
                      else " (applied when the swarm runs)"))
