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


@pytest.mark.parametrize("kind, excused", [("sleep", "killed"), ("gil", "abandoned")])
def test_a_run_stopped_by_the_engine_is_cut_short_but_not_one_the_soak_ended(kind, excused):
    """Excused: a run whose process the soak killed, and a "gil" run whose listener the soak
    stopped at once: its process holds its GIL past a lease, nobody renews it, and the engine
    rightly runs it again and ends the first run (seed 653749 reported that as "cut short")."""
    events = [ev("start", "a", 1, 100, 1.0), ev("start", "b", 1, 101, 1.0)] + ran(
        "a", attempt=2, pid=200, at=30) + ran("b", attempt=2, pid=201, at=30)
    verdict = ledger.judge(observed({"a": kind, "b": kind},
                                    {"a": complete(2), "b": complete(2)},
                                    **{excused: {"b": {101}}}), events)
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


def test_recovery_ends_when_the_engine_gives_the_task_back_not_when_a_slot_frees():
    """The CI soak of seed 252563: two tasks of a killed node retried by the reaper 25 s after
    the kill (Redis's outage not counted), then started 5 and 10 s later, when a slot freed:
    the recovery is the 25 s."""
    events = [ev("start", "a", 1, 100, 10.0)] + ran("a", attempt=2, pid=200, at=47.0)
    verdict = ledger.judge(observed({"a": "sleep"}, {"a": recovered(1, at=37.0)},
                                    killed={"a": {100}}, displaced=[(12.0, "a")]), events)
    assert verdict.longest_recovery == pytest.approx(25.0)


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


def test_a_workflow_step_started_before_its_dependency_ended_is_out_of_order():
    events = ran("a", at=10.0) + ran("b", pid=101, at=12.0) + ran("c", pid=102, at=10.5)
    verdict = ledger.judge(observed(
        {"a": "workflow", "b": "workflow", "c": "workflow"},
        {"a": complete(), "b": complete(), "c": complete()},
        edges={"a": [], "b": ["a"], "c": ["a"]}), events)
    assert verdict.completed == 3
    assert verdict.out_of_order == [("c", "started before a ended")]
    never = ledger.judge(observed({"a": "workflow", "b": "workflow"}, {"a": {}, "b": complete()},
                                  edges={"b": ["a"]}), ran("b"))
    assert never.out_of_order == [("b", "started before a ended")]


def test_a_task_whose_attempts_the_faults_used_up_is_spent_not_lost():
    """The CI soak of seed 922987: a doomed task (one retry) killed by task_kill, its retry's
    process killed with its node before its code began; the reaper failed it, as its retries
    say. Killed once with two retries left, the same end is a loss."""
    events = [ev("start", "d", 1, 100, 1.0)]
    spent = {"status": "failed", "error_type": "ListenerLost", "error": "listener lost",
             "attempts": "2"}
    verdict = ledger.judge(observed({"d": "doomed"}, {"d": spent},
                                    displaced=[(1.5, "d"), (3.0, "d")], killed={"d": {100}}),
                           events)
    assert not verdict.lost and not verdict.never_recovered
    assert [task_id for task_id, _ in verdict.spent_by_faults] == ["d"]
    once = ledger.judge(observed({"s": "sleep"}, {"s": dict(spent, attempts="3")},
                                 displaced=[(1.5, "s")], killed={"s": {100}}),
                        [ev("start", "s", 1, 100, 1.0)])
    assert [task_id for task_id, _ in once.lost] == ["s"] and not once.spent_by_faults
    assert once.never_recovered == ["s"]


def test_a_designed_failure_and_a_fault_spend_a_doomed_task_but_not_an_error_of_its_own():
    events = ran("d", outcome="fail") + [ev("start", "d", 2, 101, 20.0)]
    final = {"status": "failed", "error_type": "ProcessDied", "attempts": "2"}
    verdict = ledger.judge(observed({"d": "doomed"}, {"d": final},
                                    displaced=[(21.0, "d")], killed={"d": {101}}), events)
    assert [task_id for task_id, _ in verdict.spent_by_faults] == ["d"] and not verdict.lost
    other = ledger.judge(observed({"d": "doomed"}, {"d": dict(final, error_type="KeyError")},
                                  displaced=[(21.0, "d")], killed={"d": {101}}), events)
    assert [task_id for task_id, _ in other.lost] == ["d"]


# -- limits (issue 39): MAX_RUNNING and MAX_RUNNING_PER_KEY never exceeded -------------------

LIMITS = {"limited": {"max_running": 2, "max_running_per_key": None},
          "keyed": {"max_running": None, "max_running_per_key": 1}}


def judged_limits(tasks, events, final=None, **kwargs):
    final = final or {task_id: complete() for task_id in tasks}
    return ledger.judge(observed(tasks, final, limits=LIMITS, **kwargs), events).over_limit


def test_runs_within_their_limits_are_not_reported():
    # two at once, the third starting as the first ends; a key's runs one after the other
    events = (ran("a", at=10.0) + ran("b", pid=101, at=10.5) + ran("c", pid=102, at=11.0)
              + ran("k1", pid=103, at=10.0) + ran("k2", pid=104, at=11.0)
              + ran("x", pid=105, at=10.2))  # another key beside them
    tasks = {"a": "limited", "b": "limited", "c": "limited", "k1": "keyed", "k2": "keyed",
             "x": "keyed"}
    keys = {"k1": "key-1", "k2": "key-1", "x": "key-2"}
    assert judged_limits(tasks, events, concurrency_keys=keys) == []
    verdict = ledger.judge(observed(tasks, {task_id: complete() for task_id in tasks},
                                    limits=LIMITS, concurrency_keys=keys), events)
    assert verdict.limit_peaks == {"limited queue": (2, 2), "keyed key key-1": (1, 1),
                                   "keyed key key-2": (1, 1)}


def test_a_queue_running_more_than_its_max_running_is_caught():
    events = ran("a", at=10.0) + ran("b", pid=101, at=10.2) + ran("c", pid=102, at=10.4)
    tasks = {"a": "limited", "b": "limited", "c": "limited"}
    assert judged_limits(tasks, events) == [("limited queue", 3, 2, 10.4)]


def test_two_runs_of_one_key_at_once_are_caught():
    events = ran("k1", at=10.0) + ran("k2", pid=101, at=10.9) + ran("x", pid=102, at=10.5)
    tasks = {"k1": "keyed", "k2": "keyed", "x": "keyed"}
    keys = {"k1": "key-1", "k2": "key-1", "x": "key-2"}
    assert judged_limits(tasks, events, concurrency_keys=keys) == [("keyed key key-1", 2, 1,
                                                                     10.9)]


def recovered(attempt, at, error_type="ListenerLost", node="host~a_1"):
    return {"status": "complete", "attempts": str(attempt + 1),
            "errors": ledger.json.dumps([{"type": error_type, "time": at, "attempt": attempt,
                                          "node": node}])}


def span(task_id, pid, start, end):
    return [ev("start", task_id, 1, pid, start), ev("end", task_id, 1, pid, end, "ok")]


def test_a_killed_run_holds_its_slot_until_the_engine_recorded_its_end():
    """A killed run (a start, no end) counts until the reaper's recovery, not until the kill:
    a task starting in between, beside another, is one too many; one starting after the
    recovery is not."""
    killed = [ev("start", "a", 1, 100, 10.0)] + ran("a", attempt=2, pid=200, at=20.0)
    tasks = {"a": "limited", "b": "limited", "c": "limited"}
    final = {"a": recovered(1, at=15.0), "b": complete(), "c": complete()}
    early = killed + span("b", 101, 11.0, 17.0) + span("c", 102, 14.0, 16.0)
    assert judged_limits(tasks, early, final) == [("limited queue", 3, 2, 14.0)]
    late = killed + span("b", 101, 11.0, 17.0) + span("c", 102, 15.5, 16.0)
    assert judged_limits(tasks, late, final) == []


def test_a_run_ended_by_a_skewed_listener_is_counted_on_the_real_clock():
    """ProcessDied is recorded by the task's listener, on its clock (20 s ahead here): made
    real, the run ended at 12, before c started beside b."""
    killed = [ev("start", "a", 1, 100, 10.0)] + ran("a", attempt=2, pid=200, at=20.0)
    tasks = {"a": "limited", "b": "limited", "c": "limited"}
    final = {"a": recovered(1, at=32.0, error_type="ProcessDied", node="skewed~b_2"),
             "b": complete(), "c": complete()}
    events = killed + span("b", 101, 11.0, 14.0) + span("c", 102, 13.0, 14.0)
    assert judged_limits(tasks, events, final, skews={"skewed~b_2": 20.0}) == []
    assert judged_limits(tasks, events, final) == [("limited queue", 3, 2, 13.0)]


def test_a_run_cut_off_from_redis_for_longer_than_a_lease_may_stop_itself():
    """Redis away for longer than a cut-off while a task's code waits on it (a checkpoint):
    its process stops the task, by the lease rules, and the engine records the run as cut off
    (or its listener lost): not cut short. Without that record, or with a shorter outage, it
    is cut short."""
    events = [ev("start", "a", 1, 100, 10.0)] + ran("a", attempt=2, pid=200, at=60.0)
    cut_off = ledger.TIMINGS.cut_off
    outage = [(12.0, 12.0 + cut_off + 6)]
    for error_type in ("CutOff", "ListenerLost"):
        final = {"a": recovered(1, at=12.0 + cut_off + 7, error_type=error_type)}
        assert ledger.judge(observed({"a": "checkpoint"}, final, outages=outage),
                            events).cut_short == []
    final = {"a": recovered(1, at=12.0 + cut_off + 7, error_type="CutOff")}
    assert ledger.judge(observed({"a": "checkpoint"}, final, outages=[(12.0, 14.0)]),
                        events).cut_short == [("a", 1, 100)]
    assert ledger.judge(observed({"a": "checkpoint"}, {"a": complete(attempts=2)},
                                 outages=outage), events).cut_short == [("a", 1, 100)]


def test_a_task_of_a_limited_queue_is_not_held_to_the_recovery_bound_but_must_recover():
    """Its next start also waits for a slot of its queue; it must still start again."""
    events = [ev("start", "a", 1, 100, 10.0)] + ran("a", attempt=2, pid=200, at=90.0)
    limits = {"limited": {"max_running": 2, "max_running_per_key": None}}
    verdict = ledger.judge(observed({"a": "limited"}, {"a": complete(2)}, killed={"a": {100}},
                                    displaced=[(12.0, "a")], limits=limits), events)
    assert verdict.longest_recovery == 0.0 and verdict.recoveries == []
    assert verdict.limited_recoveries == [(pytest.approx(78.0), "a")]
    stuck = ledger.judge(observed({"a": "limited"}, {"a": {"status": "started"}},
                                  killed={"a": {100}}, displaced=[(12.0, "a")], limits=limits),
                         [ev("start", "a", 1, 100, 10.0)])
    assert stuck.never_recovered == ["a"]
