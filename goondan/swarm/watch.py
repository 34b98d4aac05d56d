"""``--watch``: poll the bundle's files, reload, and name the agents whose inputs changed.

Polling mtimes (stdlib only) of ``Bundle.watched_files()`` every ``interval_s``;
a change is acted on once the files have been quiet for ``debounce_s`` (editors write in
several steps). The new bundle is loaded in a worker thread; a bundle that fails to load is
logged and the running configuration kept. Each agent has a fingerprint of everything that
shapes its process — its resource, model, prompts, tool and extension bindings and the content
of their entry files, and the Swarm policy — and only agents whose fingerprint changed are
restarted (docs/orchestrator.md "`goondan run`"); their history is kept.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import json
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from goondan.errors import GoondanError

__all__ = ["BundleWatcher", "agent_fingerprints"]

_log = logging.getLogger("goondan.swarm.watch")


def _digest(path: Path) -> str:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return "missing"


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            f.name: _plain(getattr(value, f.name))
            for f in dataclasses.fields(value)
            if f.name != "resource"
        }
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


def agent_fingerprints(bundle: Any, swarm: str | None) -> dict[str, str]:
    """``{agent: sha256}`` over everything that shapes the agent's process."""
    spec = bundle.swarm_spec(swarm)
    policy = {
        "maxSteps": spec.max_steps_per_turn,
        "grace": spec.shutdown_grace_ms,
        "agents": sorted(spec.agents),
    }
    out: dict[str, str] = {}
    for name in spec.agents:
        agent = bundle.agent_spec(name, swarm=spec.name)
        resource = getattr(agent, "resource", None)
        entries = [b.entry for b in [*agent.tools, *agent.extensions]]
        data = {
            "agent": _plain(agent),
            "resource": _plain(getattr(resource, "spec", None)),
            "entries": {str(p): _digest(Path(p)) for p in entries},
            "policy": policy,
        }
        out[name] = hashlib.sha256(
            json.dumps(data, sort_keys=True, default=str).encode()
        ).hexdigest()
    return out


Reload = Callable[[Any, list[str]], Awaitable[None]]


class BundleWatcher:
    """Polls the bundle and calls ``on_reload(new_bundle, changed_agents)`` after edits."""

    def __init__(
        self, bundle: Any, on_reload: Reload, *, state_root: Path, swarm: str | None,
        interval_s: float = 0.5, debounce_s: float = 0.3,
    ) -> None:
        self.bundle = bundle
        self.on_reload = on_reload
        self.state_root = state_root
        self.swarm = swarm
        self.interval_s = interval_s
        self.debounce_s = debounce_s
        self.reloads = 0
        self._fingerprints = agent_fingerprints(bundle, swarm)
        self._task: asyncio.Task[None] | None = None

    def __repr__(self) -> str:
        return f"<BundleWatcher root={str(self.bundle.root)!r} reloads={self.reloads}>"

    def _snapshot(self) -> dict[Path, float]:
        out: dict[Path, float] = {}
        for path in self.bundle.watched_files():
            with contextlib.suppress(OSError):
                out[path] = path.stat().st_mtime_ns
        return out

    def start(self) -> None:
        """Start polling in the running loop."""
        self._task = asyncio.ensure_future(self._loop())

    async def stop(self) -> None:
        """Stop polling."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _loop(self) -> None:
        seen = await asyncio.to_thread(self._snapshot)
        while True:
            await asyncio.sleep(self.interval_s)
            current = await asyncio.to_thread(self._snapshot)
            if current == seen:
                continue
            # debounce: wait until the files stop changing
            while True:
                await asyncio.sleep(self.debounce_s)
                settled = await asyncio.to_thread(self._snapshot)
                if settled == current:
                    break
                current = settled
            seen = current
            await self._reload()
            seen = await asyncio.to_thread(self._snapshot)  # the new bundle may watch more files

    async def _reload(self) -> None:
        from goondan.config import load_bundle

        try:
            bundle = await asyncio.to_thread(
                load_bundle, self.bundle.root, state_root=self.state_root
            )
            fingerprints = await asyncio.to_thread(agent_fingerprints, bundle, self.swarm)
        except GoondanError as err:
            _log.error(
                "bundle changed but does not load; keeping the running configuration: [%s] %s",
                err.code,
                err.message,
                extra={"event": "orchestrator.reloadFailed"},
            )
            return
        changed = sorted(a for a, fp in fingerprints.items() if self._fingerprints.get(a) != fp)
        self.bundle, self._fingerprints = bundle, fingerprints
        self.reloads += 1
        _log.info("bundle changed; agents to restart: %s", changed or "none",
                  extra={"event": "orchestrator.bundleChanged", "agents": changed})
        await self.on_reload(bundle, changed)
