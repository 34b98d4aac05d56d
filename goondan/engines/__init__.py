"""Execution engines: where a swarm's agent instances run (docs/scaling.md).

The orchestrator talks to its workers only through :class:`~goondan.swarm.spawner.Spawner`
(docs/architecture.md, "Seams"), so an engine is a Spawner:

* ``local`` (default) — :class:`~goondan.swarm.spawner.ProcessSpawner`, one OS process per
  (agent, instanceKey) on this machine;
* ``ray`` — :class:`goondan.engines.ray.RaySpawner`, many instances per Ray host actor across a
  Ray cluster. Ray is an optional extra (``pip install 'pygoondan[ray]'``) and is imported only
  when this engine is chosen: ``import goondan`` never imports it.
"""

from __future__ import annotations

__all__ = ["ENGINES"]

ENGINES = ("local", "ray")
