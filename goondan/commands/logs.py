"""``goondan logs``: show (or follow) the log files of a running or finished swarm.

Files live under ``<state_root>/runtime/logs/<runtime key>/<process>.{stdout,stderr}.log``
(the runtime key is ``<instanceKey>.<workspaceId>``, docs/cli.md); the orchestrator is
``orchestrator``, agent processes are ``<agent>.<conversation key>`` (the key made path-safe:
``alert:db`` → ``alert-db``), connector processes ``connection.<name>``. A ``--process`` that
names no process with logs gets the real name suggested. Lines are JSON records, printed as
``time process LEVEL message`` (coloured on a terminal); ``--json`` prints them as they are (one
JSON object per line).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import click

from goondan.commands.common import (
    get_globals,
    register_bundle_secrets,
    running_swarm_options,
    style,
)

__all__ = ["format_record", "logs", "parse_since"]

_LEVEL_COLOURS = {"debug": "bright_black", "info": "green", "warning": "yellow", "warn": "yellow",
                  "error": "red", "critical": "red"}
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhd])$")


def parse_since(value: str) -> datetime:
    """``30s``, ``10m``, ``2h``, ``1d`` ago, or an ISO-8601 time (UTC when no zone is given)."""
    match = _DURATION.match(value.strip())
    if match:
        seconds = float(match.group(1)) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[match.group(2)]
        return datetime.now(UTC) - timedelta(seconds=seconds)
    try:
        parsed = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError as exc:
        raise click.BadParameter(
            f"{value!r} is neither a duration (30s, 10m, 2h, 1d) nor an ISO time"
        ) from exc
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _record(line: str) -> dict[str, Any] | None:
    if not line.startswith("{"):
        return None
    try:
        data = json.loads(line)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def _timestamp(record: dict[str, Any] | None) -> datetime | None:
    if record is None or not isinstance(record.get("timestamp"), str):
        return None
    try:
        stamp = datetime.fromisoformat(record["timestamp"].replace("Z", "+00:00"))
    except ValueError:
        return None
    return stamp if stamp.tzinfo else stamp.replace(tzinfo=UTC)


def format_record(line: str, process: str, *, color: bool) -> str:
    """One log line as ``HH:MM:SS process LEVEL message`` (non-JSON lines are kept as they are)."""
    record = _record(line)
    if record is None:
        return f"{'':8} {process} {line}"
    stamp = _timestamp(record)
    when = stamp.astimezone().strftime("%H:%M:%S") if stamp else "--:--:--"
    level = str(record.get("level") or "info").lower()
    message = str(record.get("message") or "")
    if record.get("exception"):
        message += "\n" + str(record["exception"])
    name = str(record.get("process") or process)
    return (
        f"{style(when, color, fg='bright_black')} {style(name, color, fg='cyan')} "
        f"{style(level.upper().ljust(5), color, fg=_LEVEL_COLOURS.get(level, 'white'))} {message}"
    )


def _keep(line: str, *, trace: str | None, since: datetime | None) -> bool:
    if trace is not None and trace not in line:
        return False
    if since is not None:
        stamp = _timestamp(_record(line))
        if stamp is None or stamp < since:
            return False
    return True


@click.command("logs")
@running_swarm_options
@click.option(
    "-i",
    "--instance-key",
    default=None,
    help="The swarm's instance key [default: the swarm of --bundle, else the running one, "
    "else the one that logged last].",
)
@click.option("-p", "--process", "process", default=None,
              help="Process name: 'orchestrator' (default), '<agent>.<conversation>' or "
              "'connection.<name>' (see --list).")
@click.option(
    "-a", "--agent", default=None, help="Every process of this agent (all its conversations)."
)
@click.option("--trace", "trace", default=None, help="Only lines of this trace id.")
@click.option(
    "--since",
    "since",
    default=None,
    help="Only lines since a duration ago (30s, 10m, 2h, 1d) or an ISO time.",
)
@click.option(
    "--stream", type=click.Choice(["stdout", "stderr", "both"]), default="both", show_default=True
)
@click.option("-l", "--lines", default=200, show_default=True, type=click.IntRange(min=0),
              help="How many of the last matching lines to show per file.")
@click.option(
    "-f", "--follow", is_flag=True, default=False, help="Keep printing new lines (Ctrl-C stops)."
)
@click.option(
    "--list",
    "list_processes",
    is_flag=True,
    default=False,
    help="List the processes that have logs.",
)
@click.option("--json", "as_json", is_flag=True, default=False, help="Print the raw JSON lines.")
def logs(
    bundle: str | None,
    swarm: str | None,
    instance_key: str | None,
    process: str | None,
    agent: str | None,
    trace: str | None,
    since: str | None,
    stream: str,
    lines: int,
    follow: bool,
    list_processes: bool,
    as_json: bool,
) -> int:
    """Show the last lines of a swarm's process logs (pretty; --json raw), or follow them."""
    from goondan.errors import ConfigError, UsageError
    from goondan.ipc.logs import follow_lines, log_files, valid_process_name
    from goondan.secrets import mask

    options = get_globals()
    as_json = as_json or options.json_errors
    state_root = options.resolve_state_root()
    since_at = parse_since(since) if since is not None else None
    key, directory = _log_dir(state_root, bundle or options.bundle, swarm, instance_key)
    # process output may hold a key a tool printed: the secrets of the bundle whose logs these
    # are (its workspace record names it) are masked wherever this runs
    given = bundle or options.bundle
    own = _bundle_of(state_root, directory)
    register_bundle_secrets(
        state_root, bundles=tuple(Path(p) for p in (given, own) if p is not None)
    )
    names = (
        sorted({p.name.rsplit(".", 2)[0] for p in directory.glob("*.log")})
        if directory.is_dir()
        else []
    )
    for name in (process, agent):
        if name is not None and not valid_process_name(name):
            raise UsageError(f"invalid process name {name!r}: process names match [A-Za-z0-9._-]+",
                             code="E_USAGE", suggestion=_real_name(name, names))
    # pooled isolation (docs/scaling.md): instances log into their host's files, line by line
    hosted = _hosted_instances(directory, names)
    where = {inst: host for host, insts in hosted.items() for inst in insts}
    names = sorted({*names, *where})
    if list_processes:
        if as_json:
            click.echo(json.dumps({"instanceKey": key, "logDir": str(directory),
                                   "processes": names, "hosts": hosted}))
        elif names:
            for name in names:
                if name in hosted:
                    name += f"  (instances: {', '.join(hosted[name]) or 'none yet'})"
                elif name in where:
                    name += f"  (in {where[name]})"
                click.echo(name)
        else:
            click.echo(f"No process has logged yet for {key!r} (in {directory}).")
        return 0
    if agent is not None:
        chosen_names = [n for n in names if n.startswith(agent + ".")]
        if not chosen_names:
            raise ConfigError(
                f"agent {agent!r} has no logs for {key!r} in {directory}",
                code="E_RUN_NO_LOGS",
                suggestion="see 'goondan logs --list' for the processes with logs",
            )
    else:
        chosen_names = [process or "orchestrator"]
    chosen: dict[str, Path] = {}
    only: dict[str, str] = {}  # label -> the instance whose lines a host file gives
    for name in chosen_names:
        files = log_files(directory, name)
        if name in where and not any(path.exists() for path in files.values()):
            files = log_files(directory, where[name])
            only.update({f"{name}:{which}": name for which in files})
        for which, path in files.items():
            if stream in (which, "both"):
                chosen[f"{name}:{which}"] = path
    if not any(p.exists() for p in chosen.values()):
        raise ConfigError(
            f"no log files for process {chosen_names[0]!r} of {key!r} in {directory}",
            code="E_RUN_NO_LOGS", suggestion=_real_name(chosen_names[0], names),
        )

    def show(label: str, line: str) -> None:
        if not _keep(line, trace=trace, since=since_at):
            return
        name = label.split(":", 1)[0]
        if as_json:
            click.echo(
                mask(
                    line
                    if _record(line) is not None
                    else json.dumps(
                        {"process": name, "stream": label.split(":", 1)[1], "message": line}
                    )
                )
            )
        else:
            click.echo(mask(format_record(line, name, color=options.color)))

    if not as_json and not options.quiet:
        what = f"agent {agent}" if agent is not None else chosen_names[0]
        click.echo(
            style(f"Logs of {what} (instanceKey={key}) in {directory}", options.color, bold=True)
        )
    shown = 0
    for label, line in _merged(chosen, lines, trace=trace, since=since_at, only=only):
        show(label, line)
        shown += 1
    if not shown and not as_json and not options.quiet:
        click.echo("(no matching lines)" if trace or since else "(empty)")
    if follow:
        try:
            for label, line in follow_lines(chosen):
                if _of_process(line, only.get(label)):
                    show(label, line)
        except KeyboardInterrupt:
            return 130  # interrupted, as every command (docs/cli.md "Exit codes")
    return 0


def _real_name(name: str, names: list[str]) -> str:
    """A suggestion for a ``--process`` that names no process with logs: the path-safe form of
    ``<agent>.<key>`` (``ops.alert:db`` → ``ops.alert-db``), ``connection.<name>`` for
    ``connector.<name>``, else the closest name."""
    from goondan.config.schema import did_you_mean

    head, dot, tail = name.partition(".")
    if dot:
        safe = re.sub(r"[^A-Za-z0-9._-]+", "-", tail).strip("-") or "default"
        for candidate in (f"{head}.{safe}", f"connection.{safe}"):
            if candidate in names:
                return f"the process is named {candidate!r}: goondan logs --process {candidate}"
    guess = did_you_mean(name, names) if names else None
    if guess is not None:
        return f"did you mean {guess!r}? ('goondan logs --list' lists the processes with logs)"
    return "see 'goondan logs --list' for the processes with logs"


def _instance_key_of(state_root: Path, log_dir: Path) -> str:
    """The Swarm's instanceKey of a log folder ``<instanceKey>.<workspaceId>`` (its whole name
    when no workspace record tells where the key ends)."""
    from goondan.workspace.record import iter_workspace_records

    for record in iter_workspace_records(state_root):
        suffix = "." + record["workspaceId"]
        if log_dir.name.endswith(suffix):
            return log_dir.name[: -len(suffix)]
    return log_dir.name


def _bundle_of(state_root: Path, log_dir: Path) -> Path | None:
    """The bundle recorded for the workspace of a log folder (``<instanceKey>.<workspaceId>``)."""
    from goondan.workspace.record import iter_workspace_records

    return next((Path(r["bundleRoot"]) for r in iter_workspace_records(state_root)
                 if log_dir.name.endswith("." + r["workspaceId"])), None)


def _of_process(line: str, process: str | None) -> bool:
    """True unless ``process`` is given and ``line`` is not a log record of that instance."""
    if process is None:
        return True
    record = _record(line)
    return record is not None and _writer(record) == process


def _writer(record: dict[str, Any]) -> str | None:
    """The instance (``<agent>.<key>``) or connection a host's log record names."""
    from goondan.ipc.logs import connection_process_name, process_name

    if isinstance(record.get("agent"), str) and isinstance(record.get("instanceKey"), str):
        return process_name(record["agent"], record["instanceKey"])
    if isinstance(record.get("connection"), str):
        return connection_process_name(record["connection"])
    return None


def _hosted_instances(directory: Path, names: list[str]) -> dict[str, list[str]]:
    """``host.pool-N`` -> the instances whose lines its log files hold (pooled isolation)."""
    from goondan.ipc.logs import log_files

    out: dict[str, list[str]] = {}
    for name in names:
        if not name.startswith("host."):
            continue
        seen: set[str] = set()
        for path in log_files(directory, name).values():
            if path.exists():
                with path.open("r", encoding="utf-8", errors="replace") as handle:
                    for line in handle:
                        if (record := _record(line)) is not None:
                            seen.add(str(_writer(record)))
        out[name] = sorted(seen - {"None"})
    return out


def _merged(files: dict[str, Path], count: int, *, trace: str | None,
            since: datetime | None, only: dict[str, str] | None = None,
            ) -> Iterable[tuple[str, str]]:
    """The last ``count`` matching lines of each file, merged in time order (``only``: label ->
    the instance whose lines of that file are kept)."""
    from collections import deque

    rows: list[tuple[float, int, str, str]] = []
    order = 0
    for label, path in files.items():
        if not path.exists() or count <= 0:
            continue
        keep: deque[str] = deque(maxlen=count)
        with path.open("r", encoding="utf-8", errors="replace") as handle:
            for raw in handle:
                line = raw.rstrip("\n")
                if (line.strip() and _keep(line, trace=trace, since=since)
                        and _of_process(line, (only or {}).get(label))):
                    keep.append(line)
        for line in keep:
            stamp = _timestamp(_record(line))
            rows.append((stamp.timestamp() if stamp else 0.0, order, label, line))
            order += 1
    # a stable sort: lines without a timestamp stay after their predecessors in the same file
    last = 0.0
    fixed: list[tuple[float, int, str, str]] = []
    for when, index, label, line in rows:
        last = when if when else last
        fixed.append((when or last, index, label, line))
    for _, _, label, line in sorted(fixed):
        yield label, line


def _log_dir(state_root: Path, bundle: str | None, swarm: str | None,
             instance_key: str | None) -> tuple[str, Path]:
    """``(instance key, log directory)`` of the swarm to show."""
    from goondan.errors import ConfigError
    from goondan.ipc.logs import log_dir_for
    from goondan.swarm.daemon import bundle_runtime_key
    from goondan.swarm.state import read_active

    base = log_dir_for(state_root, "x").parent
    if instance_key is not None:
        exact = log_dir_for(state_root, instance_key)
        if exact.is_dir():
            return instance_key, exact
        prefix = exact.name + "."
        scoped = (
            [d for d in base.iterdir() if d.is_dir() and d.name.startswith(prefix)]
            if base.is_dir()
            else []
        )
        if scoped:
            return instance_key, max(scoped, key=_last_write)
        return instance_key, exact
    here = Path.cwd()
    if bundle is not None or (here / "goondan.yaml").is_file():
        key, loaded = bundle_runtime_key(Path(bundle) if bundle else here, swarm, state_root)
        return loaded.swarm_spec(swarm).instance_key, log_dir_for(state_root, key)
    active = read_active(state_root)
    if active is not None:
        return active.instance_key, Path(active.log_dir) if active.log_dir else log_dir_for(
            state_root, active.runtime_key
        )
    dirs = [d for d in base.iterdir() if d.is_dir() and _last_write(d) > 0] if base.is_dir() else []
    if not dirs:
        raise ConfigError(
            "no swarm has been started under this state root",
            code="E_RUN_NOT_RUNNING",
            suggestion="pass --bundle or --instance-key, or start one with 'goondan run'",
        )
    newest = max(dirs, key=_last_write)
    return _instance_key_of(state_root, newest), newest


def _last_write(directory: Path) -> float:
    return max((f.stat().st_mtime for f in directory.glob("*.log")), default=0.0)
