"""A Turn cut short by its process's death, as the orchestrator sees it (docs/orchestrator.md
"Crashes").

An agent process journals its Turns (docs/conversations.md "Durability"): a Turn whose process
dies resumes in the respawned process, which reports it in its ``runtime.ready``
(``resuming``: the Turn's input event). So when a process ends during a started Turn the
orchestrator answers nobody: it holds the event (:attr:`InstanceRecord.interrupted`), respawns
the instance as usual (with the crash backoff), and when the new process is ready
:func:`settle_on_ready` decides:

* the process resumes that Turn → it is the instance's in-flight event again; the caller that
  still waits gets the resumed Turn's answer (same ``replyTo``), not ``E_AGENT_CRASHED``;
* the process resumes nothing although it journals → the Turn never reached the journal
  (killed between ``turnStarted`` and its first record): nothing of it was written, so a
  request whose caller still waits is queued again at the front; a notification (no caller)
  is dropped, since it cannot be told from a Turn that ended just before the kill;
* the process keeps no journal (another handler) → ``E_AGENT_CRASHED``, as before.

A process that resumes a Turn the orchestrator does not know (it started after an earlier
orchestrator died) gets that Turn as its in-flight event too; nobody waits for its answer.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Container

from goondan.ipc.control import Ready
from goondan.swarm.instance_queue import InFlight
from goondan.swarm.supervision import InstanceRecord
from goondan.types import AgentEvent

__all__ = ["settle_on_ready"]

FailRequest = Callable[[AgentEvent, InstanceRecord, str, str], None]


def settle_on_ready(rec: InstanceRecord, ready: Ready, pending: Container[str], fail: FailRequest,
                    logger: logging.Logger) -> str | None:
    """Apply the ready report of ``rec``'s new process to the Turn held since the last one died.

    ``pending``: the correlation ids whose caller still waits; ``fail``: answer a request with
    an error (the orchestrator's ``_fail_request``). Returns what happened to the held event
    (``resumed``, ``requeued``, ``crashed``, ``dropped``), None when none was held."""
    held, how = rec.take_interrupted() or (None, "")
    resuming = ready.resuming if isinstance(ready.resuming, dict) else None
    if resuming is not None:
        event = (
            held
            if held is not None and held.id == resuming.get("id")
            else AgentEvent.from_dict(resuming)
        )
        rec.inbox.remove_waiting(event.id)  # a connector event may have been queued again
        if rec.inbox.current is None:
            rec.inbox.current = InFlight(event, started=True)
        logger.info("%s resumes the turn of event %s", rec.name, event.id,
                    extra={"event": "orchestrator.turnResumed", "agentName": rec.agent_name,
                           "instanceKey": rec.instance_key, "eventId": event.id})
        if held is None or held is event:
            return "resumed" if held is not None else None
    if held is None:
        return None
    if not ready.journal:
        fail(held, rec, "E_AGENT_CRASHED", f"agent {rec.agent_name}@{rec.instance_key} exited "
             f"({how}) before answering; it is respawned with its committed history")
        return "crashed"
    if held.reply_to is not None and held.reply_to.correlation_id in pending:
        rec.inbox.push_front([held])
        return "requeued"
    logger.warning(
        "%s: the turn of event %s is not resumed (it had ended, or was killed before "
        "its first journal record) and nobody waits for it: it is not run again",
        rec.name,
        held.id,
    )
    return "dropped"
