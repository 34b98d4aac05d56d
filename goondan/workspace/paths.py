"""Every on-disk path of goondan's state, in one place.

System Root (docs/conversations.md "Where state lives")::

    <stateRoot>/workspaces/<workspaceId>/instances/<instanceDir>/
        metadata.json  turn.jsonl  messages/base.jsonl  messages/events.jsonl
        extensions/<name>.json  .lock

* state root: ``--state-root`` > ``GOONDAN_STATE_ROOT`` > ``stateRoot`` in
  ``~/.goondan/config.toml`` > ``~/.goondan`` (resolving never creates anything, so a read-only
  home works as long as it is not the chosen root);
* workspaceId: ``<slug>-<first 8 hex of sha256(absolute bundle root)>``;
* instance directory: ``<agent>:<instanceKey>`` with characters outside
  ``[A-Za-z0-9_:-]`` replaced by ``-`` and cut to 128 characters, as the reference runtime does.
  When that name is already taken by another (agent, key) — sanitising is lossy — a short hash
  of the pair is appended (:func:`collision_dir_name`).
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from goondan.errors import WorkspaceError

__all__ = [
    "ENV_STATE_ROOT",
    "InstancePaths",
    "StateLayout",
    "collision_dir_name",
    "instance_dir_name",
    "read_user_config",
    "resolve_state_root",
    "slugify",
    "user_config_path",
    "workspace_id_for",
    "write_user_config",
]

ENV_STATE_ROOT = "GOONDAN_STATE_ROOT"
MAX_DIR_NAME = 128
_DIR_UNSAFE = re.compile(r"[^A-Za-z0-9_:-]")
_SLUG_UNSAFE = re.compile(r"[^a-z0-9._-]")
_FILE_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


def _home(env: Mapping[str, str]) -> Path:
    home = env.get("HOME")
    return Path(home) if home else Path.home()


def user_config_path(env: Mapping[str, str] = os.environ) -> Path:
    """``~/.goondan/config.toml`` (the user-level settings file)."""
    return _home(env) / ".goondan" / "config.toml"


def read_user_config(env: Mapping[str, str] = os.environ) -> dict[str, Any]:
    """The user config as a dict; ``{}`` when the file does not exist."""
    path = user_config_path(env)
    try:
        with path.open("rb") as handle:
            raw = handle.read()
    except FileNotFoundError:
        return {}
    except NotADirectoryError:
        return {}
    except PermissionError as exc:
        raise WorkspaceError(
            f"cannot read {path}: permission denied", code="E_WORKSPACE_CONFIG",
            location=str(path), suggestion="fix the file's permissions or pass --state-root",
        ) from exc
    except OSError as exc:  # a directory, an I/O error …: still the user's file, not a bug
        raise WorkspaceError(
            f"cannot read {path}: {exc.strerror or exc}",
            code="E_WORKSPACE_CONFIG",
            location=str(path),
            suggestion="make it a TOML file (or remove it), or pass --state-root",
        ) from exc
    # only when the file exists: most starts have none (docs/runtime.md "Performance")
    import tomllib

    try:
        return tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise WorkspaceError(
            f"{path} is not valid TOML: {exc}", code="E_WORKSPACE_CONFIG", location=str(path),
            suggestion="fix the file, or pass --state-root / set GOONDAN_STATE_ROOT",
        ) from exc


def write_user_config(values: Mapping[str, Any], env: Mapping[str, str] = os.environ) -> Path:
    """Merge ``values`` into ``~/.goondan/config.toml`` (written with tomli-w); return its path."""
    import tomli_w

    path = user_config_path(env)
    merged = {**read_user_config(env), **values}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(tomli_w.dumps(merged).encode("utf-8"))
    os.replace(tmp, path)
    return path


def resolve_state_root(cli_value: str | os.PathLike[str] | None = None,
                       env: Mapping[str, str] = os.environ) -> Path:
    """The System Root: ``--state-root`` > ``GOONDAN_STATE_ROOT`` > config.toml > ``~/.goondan``.

    The result is absolute. Nothing is created; a path that exists but is not a directory is
    rejected with ``E_WORKSPACE_STATE_ROOT``.
    """
    source = "--state-root"
    value: str | None = os.fspath(cli_value) if cli_value else None
    base: Path | None = None
    if not value:
        value, source = env.get(ENV_STATE_ROOT) or None, ENV_STATE_ROOT
    if not value:
        configured = read_user_config(env).get("stateRoot")
        if configured is not None and not isinstance(configured, str):
            path = user_config_path(env)
            raise WorkspaceError(
                f"{path}: stateRoot must be a string", code="E_WORKSPACE_CONFIG",
                location=str(path), suggestion='write stateRoot = "/path/to/state"',
            )
        value, source = configured or None, str(user_config_path(env))
        base = user_config_path(env).parent
    if not value:
        return _home(env) / ".goondan"
    root = _home(env) / value[2:] if value == "~" or value.startswith("~/") else Path(value)
    if not root.is_absolute():
        root = (base or Path.cwd()) / root
    root = Path(os.path.normpath(root))
    if root.exists() and not root.is_dir():
        raise WorkspaceError(
            f"the state root {root} (from {source}) is a file, not a directory",
            code="E_WORKSPACE_STATE_ROOT", location=str(root),
            suggestion="point --state-root / GOONDAN_STATE_ROOT at a directory",
        )
    return root


def slugify(text: str, limit: int = MAX_DIR_NAME) -> str:
    """The workspace-id slug: lower-case, ``[a-z0-9._-]``, no edge or repeated ``-``."""
    slug = _SLUG_UNSAFE.sub("-", text.strip().lower())
    slug = re.sub(r"-{2,}", "-", slug).strip("-")
    return (slug or "default")[:limit].rstrip("-") or "default"


def workspace_id_for(bundle_root: Path, package_name: str | None) -> str:
    """``<slug>-<sha256(absolute bundle root)[:8]>``, deterministic per project."""
    absolute = Path(os.path.abspath(bundle_root))
    digest = hashlib.sha256(str(absolute).encode("utf-8")).hexdigest()[:8]
    slug = slugify(package_name or absolute.name or "default", limit=MAX_DIR_NAME - 9)
    return f"{slug}-{digest}"


def instance_dir_name(agent_name: str, instance_key: str) -> str:
    """``<agent>:<instanceKey>`` sanitised like the reference (``[A-Za-z0-9_:-]``, 128)."""
    return _DIR_UNSAFE.sub("-", f"{agent_name}:{instance_key}")[:MAX_DIR_NAME]


def collision_dir_name(agent_name: str, instance_key: str) -> str:
    """The fallback directory name when :func:`instance_dir_name` belongs to another pair."""
    digest = hashlib.sha256(f"{agent_name}\0{instance_key}".encode()).hexdigest()[:8]
    return f"{instance_dir_name(agent_name, instance_key)[: MAX_DIR_NAME - 9]}-{digest}"


def extension_file_name(extension_name: str) -> str:
    """A safe relative path for an extension's state: ``<name>.json`` or ``<package>/<name>.json``.

    The state key is the extension's identity (docs/extensions.md, "State"): a bundle-local
    Extension's bare name, or ``<package>/<name>`` (``@scope/pkg/name``) for one from a
    dependency, which becomes sub-directories so it can never collide with a local name.
    """
    # "", "." and ".." segments are dropped: a key can never leave the extensions directory.
    parts = [_FILE_UNSAFE.sub("-", part).strip(".") for part in extension_name.split("/")]
    return "/".join([p for p in parts if p] or ["extension"]) + ".json"


@dataclass(frozen=True)
class InstancePaths:
    """The files of one instance directory."""

    dir: Path

    @property
    def metadata(self) -> Path:
        return self.dir / "metadata.json"

    @property
    def messages_dir(self) -> Path:
        return self.dir / "messages"

    @property
    def base(self) -> Path:
        return self.dir / "messages" / "base.jsonl"

    @property
    def events(self) -> Path:
        return self.dir / "messages" / "events.jsonl"

    @property
    def base_tmp(self) -> Path:
        """Where an atomic rewrite of ``base.jsonl`` is staged."""
        return self.dir / "messages" / "base.jsonl.tmp"

    @property
    def base_prev(self) -> Path:
        """Hard link to the old base kept while a rewrite commits (see ``store.py``)."""
        return self.dir / "messages" / "base.jsonl.prev"

    @property
    def journal(self) -> Path:
        """The turn journal (``goondan/workspace/journal.py``)."""
        return self.dir / "turn.jsonl"

    @property
    def extensions_dir(self) -> Path:
        return self.dir / "extensions"

    def extension(self, name: str) -> Path:
        return self.dir / "extensions" / extension_file_name(name)

    @property
    def lock(self) -> Path:
        return self.dir / ".lock"


@dataclass(frozen=True)
class StateLayout:
    """Paths under one System Root."""

    root: Path

    @property
    def workspaces_dir(self) -> Path:
        return self.root / "workspaces"

    @property
    def legacy_instances_dir(self) -> Path:
        """``<root>/instances``: a layout older reference versions wrote."""
        return self.root / "instances"

    def workspace_dir(self, workspace_id: str) -> Path:
        return self.workspaces_dir / workspace_id

    def instances_dir(self, workspace_id: str) -> Path:
        return self.workspaces_dir / workspace_id / "instances"

    def instance(self, workspace_id: str, dir_name: str) -> InstancePaths:
        return InstancePaths(self.instances_dir(workspace_id) / dir_name)
