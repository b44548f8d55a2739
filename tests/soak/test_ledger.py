"""The soak's judge on made-up runs: a soak that reports a false loss (or misses a real one)
is worse than none, so each verdict is checked here in milliseconds, without a soak."""

import importlib.util
from pathlib import Path

import pytest

PATH = Path(__file__).resolve().parents[2] / "bench" / "soak" / "ledger.py"
spec = importlib.util.spec_from_file_location("soak_ledger", PATH)
ledger = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ledger)


def ev(kind, task_id, attempt, pid, at, outcome=""):
    return ledger.Event(kind, task_id, attempt, pid, at, outcome)


def ran(task_id, attempt=1, pid=100, at=10.0, outcome="ok"):
    return [ev("start", task_id, attempt, pid, at), ev("end", task_id, attempt, pid, at + 1,
                                                      outcome)]


def observed(tasks, final, **kwargs):
    return ledger.Observed(tasks=tasks, final=final, **kwargs)


def complete(attempts=1):
    return {"status": "complete", "attempts": str(attempts)}


def test_a_clean_run_has_nothing_to_report():
    events = ran("a") + ran("b", pid=101) + ran("d", outcome="fail", pid=102) + ran(
        "d", attempt=2, pid=103, outcome="fail")
    verdict = ledger.judge(observed(
        {"a": "short", "b": "sleep", "d": "doomed"},
        {"a": complete(), "b": complete(),
         "d": {"status": "failed", "error_type": "soak.tasks.DesignedFailure",
               "attempts": "2"}}), events)
    assert (verdict.enqueued, verdict.completed, verdict.failed_by_design) == (3, 2, 1)
    assert not (verdict.lost or verdict.stuck or verdict.run_twice or verdict.cut_short)
    assert not verdict.attempts_without_run


def test_a_task_deleted_from_redis_is_lost():
    verdict = ledger.judge(observed({"a": "short", "b": "short"}, {"a": {}, "b": {}}), ran("a"))
    assert verdict.lost == [("a", "its hash is gone from Redis (its code ran to its end 1 "
                                  "time(s))"), ("b", "its hash is gone from Redis")]


def test_complete_without_its_code_reaching_the_end_is_lost():
    events = [ev("start", "a", 1, 100, 1.0)]
    verdict = ledger.judge(observed({"a": "short"}, {"a": complete()}), events)
    assert [task_id for task_id, _ in verdict.lost] == ["a"]
    assert verdict.cut_short == [("a", 1, 100)]


def test_a_failure_not_by_design_is_lost_and_a_doomed_task_failing_otherwise_too():
    final = {"a": {"status": "failed", "error_type": "ProcessDied", "error": "killed"},
             "d": {"status": "failed", "error_type": "ListenerLost", "error": "lost"}}
    verdict = ledger.judge(observed({"a": "short", "d": "doomed"}, final),
                           ran("a") + ran("d", outcome="fail"))
    assert sorted(task_id for task_id, _ in verdict.lost) == ["a", "d"]
    assert verdict.failed_by_design == 0


@pytest.mark.parametrize("status", ["pending", "reserved", "started", "scheduled"])
def test_a_task_left_unfinished_is_stuck(status):
    verdict = ledger.judge(observed({"a": "short"}, {"a": {"status": status}}), [])
    assert verdict.stuck == [("a", status)] and not verdict.lost


def test_an_id_left_in_a_queue_is_stuck_though_its_task_ended():
    verdict = ledger.judge(observed({"a": "short"}, {"a": complete()}, stray=["a"]), ran("a"))
    assert len(verdict.stuck) == 1


def test_two_successful_ends_are_a_run_twice():
    events = ran("a", pid=100) + ran("a", attempt=2, pid=200, at=30)
    verdict = ledger.judge(observed({"a": "short"}, {"a": complete(2)}), events)
    assert [task_id for task_id, _ in verdict.run_twice] == ["a"]


def test_one_attempt_ending_twice_is_a_run_twice():
    events = ran("d", pid=100, outcome="fail") + ran("d", pid=200, at=30, outcome="fail")
    final = {"d": {"status": "failed", "error_type": "x.DesignedFailure", "attempts": "1"}}
    verdict = ledger.judge(observed({"d": "doomed"}, final), events)
    assert [task_id for task_id, _ in verdict.run_twice] == ["d"]


def test_designed_retries_are_not_a_run_twice():
    events = ran("f", pid=100, outcome="fail") + ran("f", attempt=2, pid=200, at=30)
    verdict = ledger.judge(observed({"f": "flaky"}, {"f": complete(2)}), events)
    assert not verdict.run_twice and verdict.completed == 1


def test_a_task_whose_process_the_soak_killed_may_end_twice():
    events = ran("a", pid=100) + ran("a", attempt=2, pid=200, at=30)
    verdict = ledger.judge(observed({"a": "short"}, {"a": complete(2)}, killed={"a": {100}}),
                           events)
    assert not verdict.run_twice


def test_a_run_stopped_by_the_engine_is_cut_short_but_not_one_the_soak_killed():
    events = [ev("start", "a", 1, 100, 1.0), ev("start", "b", 1, 101, 1.0)] + ran(
        "a", attempt=2, pid=200, at=30) + ran("b", attempt=2, pid=201, at=30)
    verdict = ledger.judge(observed({"a": "sleep", "b": "sleep"},
                                    {"a": complete(2), "b": complete(2)},
                                    killed={"b": {101}}), events)
    assert verdict.cut_short == [("a", 1, 100)]


def test_an_attempt_charged_without_a_run_is_noted():
    verdict = ledger.judge(observed({"a": "short"}, {"a": complete(2)}), ran("a"))
    assert verdict.attempts_without_run == [("a", 2, 1)]


def test_recovery_runs_from_the_fault_to_the_next_start_less_redis_outages():
    """Less each outage and the reaper's confirmation after it (by design: a living process
    gets that long to renew once Redis answers), counted once where they overlap."""
    events = [ev("start", "a", 1, 100, 10.0)] + ran("a", attempt=2, pid=200, at=40.0)
    verdict = ledger.judge(observed({"a": "sleep"}, {"a": complete(2)}, killed={"a": {100}},
                                    displaced=[(12.0, "a")],
                                    outages=[(14.0, 20.0), (22.0, 23.0)]), events)
    away = (23.0 + ledger.CONFIRM_SECONDS) - 14.0
    assert verdict.longest_recovery == pytest.approx(40.0 - 12.0 - away)


def test_a_task_never_started_again_after_a_fault_is_never_recovered():
    events = [ev("start", "a", 1, 100, 10.0)]
    verdict = ledger.judge(observed({"a": "sleep"}, {"a": {"status": "started"}},
                                    killed={"a": {100}}, displaced=[(12.0, "a")]), events)
    assert verdict.never_recovered == ["a"]


def test_side_channel_lines_are_read_and_torn_ones_skipped(tmp_path):
    path = tmp_path / "events.log"
    path.write_text("start a 1 100 1.5\nend a 1 100 2.5 ok\nend b 1\ngarbage\nstart c x 1 1\n")
    assert ledger.read_events(path) == [ev("start", "a", 1, 100, 1.5),
                                        ev("end", "a", 1, 100, 2.5, "ok")]


def record(**kwargs):
    fields = {"ids": {"h_1": 1, "h_2": 2}, "exits": {}, "signalled": {}, "stops": []}
    return ledger.ListenerRecord(**{**fields, **kwargs})


def test_releasing_a_live_listener_is_reported():
    wrong = ledger.live_releases([(50.0, "h_1")], record(), lease=15, slack=10)
    assert [listener_id for _, listener_id, _ in wrong] == ["h_1"]


@pytest.mark.parametrize("done", [{"exits": {1: 40.0}}, {"signalled": {1: 40.0}},
                                  {"stops": [(1, 20.0, 41.0)]}])
def test_releasing_a_dead_killed_or_stopped_listener_is_not(done):
    assert ledger.live_releases([(50.0, "h_1")], record(**done), lease=15, slack=10) == []


def test_releasing_a_listener_long_after_it_was_stopped_is_reported():
    wrong = ledger.live_releases([(90.0, "h_1")], record(stops=[(1, 20.0, 41.0)]), lease=15,
                                 slack=10)
    assert len(wrong) == 1


def test_logs_give_listener_ids_and_releases(tmp_path):
    log = tmp_path / "listener-0.log"
    log.write_text("--- 1.000 started pid 42\n2026 INFO x: listener host_42 started on q with "
                   "concurrency 2\n--- 5.000 started pid 43\nlistener host_x1 started on q\n")
    assert ledger.read_listener_ids(log) == {"host_42": 42, "host_x1": 43}
    reaper = tmp_path / "reaper.log"
    reaper.write_text("12.500 q: listener host_42: released listener (heartbeat expired)\n"
                      "12.501 r: listener host_42: released listener (heartbeat expired)\n"
                      "13.000 q: task t: requeued (x)\n")
    assert ledger.read_releases(reaper) == [(12.5, "host_42")]
