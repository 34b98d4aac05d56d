"""What ``status`` shows for a crash-looping worker (issue 32 item 1): ``crashLoopBackOff`` and
the last error, also while the next attempt is starting or up, until the count starts over."""

from __future__ import annotations

from goondan.swarm.supervision import InstanceRecord


def test_a_crash_looping_agent_shows_crash_loop_back_off_and_its_last_error_between_crashes() -> (
    None
):
    rec = InstanceRecord(agent_name="worker", instance_key="k")
    for crash in range(1, 7):
        rec.begin_spawn()
        rec.transition("ready")
        assert rec.to_dict()["status"] == "idle"  # crashes 1-5 respawn at once: no loop yet
        rec.count_crash(5, cause=f"exited with code {crash}")
    assert rec.status == "crashLoopBackOff" and rec.to_dict()["lastError"] == "exited with code 6"
    rec.begin_spawn()
    rec.transition("ready")  # up again: still shown as crash-looping, not idle
    assert rec.status == "idle" and rec.to_dict()["status"] == "crashLoopBackOff"
    rec.transition("turnStarted")
    rec.turn_finished()  # a finished turn starts the count over
    row = rec.to_dict()
    assert (
        row["status"] == "idle"
        and row["consecutiveCrashes"] == 0
        and row["lastError"] == "exited with code 6"
    )
    rec.reset_crashes()  # a restart: the last error goes too
    assert rec.to_dict()["lastError"] is None
