"""What the soak concludes, from what the task processes wrote to the side channel, what the
harness did (tasks enqueued, processes killed, outages) and the tasks' final hashes in Redis.
Pure functions of those records, so the judgement can be checked on made-up runs."""

import json
import re
from collections import defaultdict
from dataclasses import dataclass, field

from django_blueque.core.timings import DEFAULT as TIMINGS

CONFIRM_SECONDS = TIMINGS.confirm

FINAL = ("complete", "failed")
DESIGNED_ERROR = "DesignedFailure"


@dataclass(frozen=True)
class Event:
    kind: str  # "start" or "end"
    task_id: str
    attempt: int
    pid: int
    at: float
    outcome: str = ""  # of an end: "ok", or "fail" (a designed failure)


def read_events(path):
    """The side channel's lines; a torn or foreign line is skipped, never guessed at."""
    events = []
    with open(path, errors="replace") as lines:
        for line in lines:
            parts = line.split()
            if len(parts) not in (5, 6) or parts[0] not in ("start", "end"):
                continue
            try:
                events.append(Event(parts[0], parts[1], int(parts[2]), int(parts[3]),
                                    float(parts[4]), parts[5] if len(parts) == 6 else ""))
            except ValueError:
                continue
    return events


@dataclass
class Observed:
    """What the harness knows besides the side channel."""

    tasks: dict  # task id -> kind (load.KINDS: "short", "sleep", "eta", "flaky"...)
    final: dict  # task id -> its hash in Redis at the end ({} if it is gone)
    killed: dict = field(default_factory=dict)  # task id -> pids of it the soak killed
    # task id -> pids of a "gil" task's runs whose listener the soak killed or stopped at once:
    # their process holds its GIL past a lease, so nobody renews it and they rightly run again
    abandoned: dict = field(default_factory=dict)
    # (fault time, task id): a task the soak took from a live process (killed, or its listener
    # killed or stopped while it held the task: reserved, or taken and not yet handed to a
    # task process); its recovery is the time to its next start
    displaced: list = field(default_factory=list)
    outages: list = field(default_factory=list)  # (start, end) while Redis was away
    stray: list = field(default_factory=list)  # ids still in a pending list or schedule
    edges: dict = field(default_factory=dict)  # workflow step id -> the ids it depends on
    # kind -> {"max_running": n or None, "max_running_per_key": n or None} of its queue
    limits: dict = field(default_factory=dict)
    concurrency_keys: dict = field(default_factory=dict)  # task id -> its concurrency key
    skews: dict = field(default_factory=dict)  # listener id -> seconds its clock is ahead


@dataclass
class Verdict:
    enqueued: int = 0
    completed: int = 0
    failed_by_design: int = 0
    spent_by_faults: list = field(default_factory=list)  # (task id, why)
    lost: list = field(default_factory=list)  # (task id, why)
    stuck: list = field(default_factory=list)  # (task id, status)
    run_twice: list = field(default_factory=list)  # (task id, why)
    cut_short: list = field(default_factory=list)  # (task id, attempt, pid)
    attempts_without_run: list = field(default_factory=list)  # (task id, attempts, runs)
    recoveries: list = field(default_factory=list)  # (seconds or None, task id)
    # the same for tasks of a queue with a limit: their next start also waits for a slot (or
    # their key's run), so their time is not held to the recovery bound
    limited_recoveries: list = field(default_factory=list)
    out_of_order: list = field(default_factory=list)  # (task id, why): started too early
    over_limit: list = field(default_factory=list)  # (what, most at once, limit, at)
    limit_peaks: dict = field(default_factory=dict)  # what -> (most at once, limit)

    @property
    def longest_recovery(self):
        times = [seconds for seconds, _ in self.recoveries if seconds is not None]
        return max(times) if times else 0.0

    @property
    def never_recovered(self):
        return [task_id for seconds, task_id in self.recoveries + self.limited_recoveries
                if seconds is None]


def overlap(start, end, windows):
    return sum(max(0.0, min(end, b) - max(start, a)) for a, b in windows)


def judge(observed, events):
    verdict = Verdict(enqueued=len(observed.tasks))
    starts, ends = defaultdict(list), defaultdict(list)
    for event in events:
        (starts if event.kind == "start" else ends)[event.task_id].append(event)
    displacements = defaultdict(int)
    for _, task_id in observed.displaced:
        displacements[task_id] += 1
    for task_id, kind in observed.tasks.items():
        _judge_outcome(verdict, task_id, kind, observed.final.get(task_id) or {},
                       ends[task_id], displacements[task_id])
        _judge_runs(verdict, task_id, starts[task_id], ends[task_id],
                    observed.killed.get(task_id, set()) | observed.abandoned.get(task_id, set()),
                    _cut_off(task_id, starts[task_id], observed))
        try:
            attempts = int((observed.final.get(task_id) or {}).get("attempts") or 0)
        except ValueError:
            attempts = 0
        runs = len({event.attempt for event in starts[task_id]})
        if attempts > runs and task_id not in observed.killed:
            verdict.attempts_without_run.append((task_id, attempts, runs))
    for task_id, dependencies in observed.edges.items():
        _judge_order(verdict, task_id, dependencies, starts, ends)
    verdict.limit_peaks, verdict.over_limit = judge_limits(observed, starts, ends)
    for task_id in observed.stray:
        verdict.stuck.append((task_id, "id left in a pending list or schedule"))
    spent = {task_id for task_id, _ in verdict.spent_by_faults}
    for at, task_id in observed.displaced:
        seconds = _recovery(at, task_id, observed, starts, ends)
        limited = any((observed.limits.get(observed.tasks.get(task_id)) or {}).values())
        if seconds is not None or task_id not in spent:  # a spent task has nothing to recover
            (verdict.limited_recoveries if limited else verdict.recoveries).append(
                (seconds, task_id))
    return verdict


SOAK_ERRORS = ("ListenerLost", "ProcessDied")
"""The error types of a run the soak itself ended (its process or its listener killed)."""


def _judge_outcome(verdict, task_id, kind, final, ends, displaced):
    """Completed, failed by design, spent by the soak's faults, or lost. A task is spent by
    the faults, not lost, when it failed of a run the soak ended and every one of its attempts
    was used either by a designed failure or by a fault of the soak (the soak took it from a
    process that often): the engine did what its retries say."""
    status = final.get("status")
    if not final:
        ran = f" (its code ran to its end {len(ends)} time(s))" if ends else ""
        verdict.lost.append((task_id, f"its hash is gone from Redis{ran}"))
    elif status not in FINAL:
        verdict.stuck.append((task_id, status))
    elif status == "complete":
        if any(end.outcome == "ok" for end in ends):
            verdict.completed += 1
        else:
            verdict.lost.append((task_id, "recorded complete, but its code never ran to the "
                                          "end"))
    elif kind == "doomed" and final.get("error_type", "").endswith(DESIGNED_ERROR):
        verdict.failed_by_design += 1
    elif final.get("error_type") in SOAK_ERRORS and _spent(final, ends, displaced):
        verdict.spent_by_faults.append((task_id, f"{displaced} fault(s) and "
                                                 f"{_designed(ends)} designed failure(s) used "
                                                 f"its {final.get('attempts')} attempt(s)"))
    else:
        verdict.lost.append((task_id, f"failed: {final.get('error_type', '')}: "
                                      f"{final.get('error', '')}"[:200]))


def _judge_order(verdict, task_id, dependencies, starts, ends):
    """A workflow step must start only after each of its dependencies ran to a good end."""
    for dependency in dependencies:
        done = [end.at for end in ends[dependency] if end.outcome == "ok"]
        early = [start.at for start in starts[task_id] if not done or start.at < min(done)]
        if early:
            verdict.out_of_order.append((task_id, f"started before {dependency} ended"))
            return


def _designed(ends):
    return len({end.attempt for end in ends if end.outcome == "fail"})


def _spent(final, ends, displaced):
    try:
        attempts = int(final.get("attempts") or 0)
    except ValueError:
        return False
    return displaced >= 1 and attempts >= 2 and _designed(ends) + displaced >= attempts


def _cut_off(task_id, starts, observed):
    """(attempt, pid) of the runs the engine ended as cut off from Redis (CutOff, or
    ListenerLost once its process stopped renewing) over which Redis was away for longer than
    a cut-off: by the lease rules, a task process whose lease nobody could renew that long
    stops its task if its code still runs (a task waiting on Redis, as a checkpoint does)."""
    final = observed.final.get(task_id) or {}
    recorded = engine_ends(final, observed.skews)
    ended_so = {attempt for attempt, (error_type, _) in _engine_errors(final).items()
                if error_type in ("CutOff", "ListenerLost")}
    long_outages = [(a, b) for a, b in observed.outages if b - a >= TIMINGS.cut_off]
    return {(start.attempt, start.pid) for start in starts if start.attempt in ended_so
            and overlap(start.at, recorded[start.attempt], long_outages) >= TIMINGS.cut_off}


def _judge_runs(verdict, task_id, starts, ends, killed_pids, cut_off=()):
    """A run to the end twice (not counted for a task whose process the soak killed, which may
    have died between its end and the record of it, or left without a renewer), and runs that
    stopped before their end though the soak did not kill their process (nor cut it off from
    Redis: ``cut_off``)."""
    ended = {(end.attempt, end.pid) for end in ends}
    for start in starts:
        if ((start.attempt, start.pid) not in ended and start.pid not in killed_pids
                and (start.attempt, start.pid) not in cut_off):
            verdict.cut_short.append((task_id, start.attempt, start.pid))
    if killed_pids:
        return
    ok = [end for end in ends if end.outcome == "ok"]
    by_attempt = defaultdict(list)
    for end in ends:
        by_attempt[end.attempt].append(end)
    repeated = [attempt for attempt, same in by_attempt.items() if len(same) > 1]
    if len(ok) > 1:
        verdict.run_twice.append((task_id, f"succeeded {len(ok)} times (pids "
                                           f"{', '.join(str(end.pid) for end in ok)})"))
    elif repeated:
        verdict.run_twice.append((task_id, f"attempt {repeated[0]} ran to its end "
                                           f"{len(by_attempt[repeated[0]])} times"))


def _merged(windows):
    """Overlapping (start, end) windows as one, so that no second is subtracted twice."""
    merged = []
    for start, end in sorted(windows):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _recovery(at, task_id, observed, starts, ends):
    """Seconds from the fault to the task given back (what the README promises within 30 s):
    the engine's record of the end of the run the fault took (retried, or failed "listener
    lost"), or the task's next start if sooner; how long a retried task then waits for a free
    slot is the load's doing. Less the time Redis was away and the reaper's confirmation after
    it (once Redis takes writes again, it watches a lapsed lease afresh for CONFIRM_SECONDS,
    the chance a living process gets to renew: by design). None if neither happened and no
    run reached its end (one may end just as the fault hits: then there is nothing to
    recover)."""
    final = observed.final.get(task_id) or {}
    moments = [start.at for start in starts[task_id] if start.at >= at]
    moments += [end for end in engine_ends(final, observed.skews).values() if end >= at]
    if moments:
        back = min(moments)
        away = _merged([(start, end + CONFIRM_SECONDS) for start, end in observed.outages])
        return max(0.0, back - at - overlap(at, back, away))
    ended = ends[task_id] and final.get("status") in FINAL
    return 0.0 if ended else None


RELEASED = re.compile(r"^(\d+\.\d+) .*listener (\S+): released listener")
LISTENER_STARTED = re.compile(r"listener (\S+) started on ")
PROCESS_STARTED = re.compile(r"^--- \d+\.\d+ started pid (\d+)")


def read_releases(reaper_log):
    """[(time, listener id)] of each listener the reaper released (its output is stamped with
    the time the harness read each line), once per pass (it prints one line per queue)."""
    releases, last = [], {}
    with open(reaper_log, errors="replace") as lines:
        for line in lines:
            if m := RELEASED.match(line):
                at, listener_id = float(m[1]), m[2]
                if at - last.get(listener_id, -10.0) > 2.0:
                    releases.append((at, listener_id))
                    last[listener_id] = at
    return releases


def read_listener_ids(log_path):
    """{listener id: pid} from one supervised listener's log: its ``started pid`` markers and
    the id each start announced (a SIGHUP re-exec keeps the pid)."""
    ids, pid = {}, None
    with open(log_path, errors="replace") as lines:
        for line in lines:
            if m := PROCESS_STARTED.match(line):
                pid = int(m[1])
            elif (m := LISTENER_STARTED.search(line)) and pid is not None:
                ids[m[1]] = pid
    return ids


@dataclass
class ListenerRecord:
    """What the harness did to the listener processes: when each one exited, when it was sent
    SIGKILL or SIGTERM, and when it was stopped (SIGSTOP to SIGCONT)."""

    ids: dict  # listener id -> pid
    exits: dict  # pid -> time its exit was seen
    signalled: dict  # pid -> time the soak sent it SIGKILL or SIGTERM
    stops: list  # (pid, SIGSTOP time, SIGCONT time)


def live_releases(releases, record, lease, slack):
    """The reaper's releases of listeners that were alive and answering: not dead or told to
    stop, and not stopped by the soak within a lease (plus ``slack``, a reaper pass) before."""
    wrong = []
    for at, listener_id in releases:
        pid = record.ids.get(listener_id)
        if pid is None:
            wrong.append((at, listener_id, "released, and no listener of the soak had this id"))
            continue
        if pid in record.signalled and at >= record.signalled[pid] - 1.0:
            continue
        if pid in record.exits and at >= record.exits[pid] - 1.0:
            continue
        if any(stopped == pid and start <= at <= end + lease + slack
               for stopped, start, end in record.stops):
            continue
        wrong.append((at, listener_id, f"released while pid {pid} was alive and running"))
    return wrong


ENGINE_ENDED = {"ListenerLost": False, "ProcessDied": True, "CutOff": True}
"""The error types of a run whose end the engine recorded without its process (the reaper's
recovery; the listener seeing its task process die, or end cut off from Redis), and whether
the time is the listener's clock (else the reaper's)."""


def _engine_errors(final):
    """{attempt: (error type, error)} of the runs whose end the engine recorded without their
    process (ENGINE_ENDED), from the task's errors."""
    try:
        errors = json.loads(final.get("errors") or "[]")
    except ValueError:
        return {}
    return {error.get("attempt"): (error["type"], error)
            for error in (errors if isinstance(errors, list) else ())
            if isinstance(error, dict) and error.get("type") in ENGINE_ENDED}


def engine_ends(final, skews):
    """{attempt: Unix time} when the engine recorded the end of a run its process did not end
    (the time on the clock of whoever recorded it, made real)."""
    ends = {}
    for attempt, (error_type, error) in _engine_errors(final).items():
        skew = skews.get(error.get("node"), 0.0) if ENGINE_ENDED[error_type] else 0.0
        ends[attempt] = float(error.get("time") or 0) - skew
    return ends


def run_spans(task_id, starts, ends, final, skews):
    """(start, end) of each run of a task as the engine counts it (its slot held): from its
    start to its end, or, for a run the engine ended without its process (killed, or lost
    with its listener), to when the engine recorded that end (the reaper's recovery: never
    at the kill alone). The side channel's start comes after the engine's, its end before:
    these spans lie within the engine's, so no overlap is invented."""
    ended = {(end.attempt, end.pid): end.at for end in ends}
    recorded = engine_ends(final, skews)
    spans = []
    for start in starts:
        candidates = [at for at in (ended.get((start.attempt, start.pid)),
                                    recorded.get(start.attempt)) if at is not None]
        spans.append((start.at, min(candidates) if candidates else start.at))
    return spans


def most_at_once(spans):
    """(the most spans open at one moment, that moment); a span ending as another starts
    is not open with it."""
    edges = sorted([(end, -1) for _, end in spans] + [(start, 1) for start, _ in spans])
    most, at, running = 0, 0.0, 0
    for moment, step in edges:
        running += step
        if running > most:
            most, at = running, moment
    return most, at


def judge_limits(observed, starts, ends):
    """For each queue's MAX_RUNNING and each concurrency key's MAX_RUNNING_PER_KEY: {what:
    (the most runs at once, the limit)}, and [(what, most, limit, at)] of those exceeded."""
    peaks, over = {}, []
    for kind, limits in observed.limits.items():
        groups = defaultdict(list)  # (what, limit) -> spans
        for task_id, of_kind in observed.tasks.items():
            if of_kind != kind:
                continue
            spans = run_spans(task_id, starts[task_id], ends[task_id],
                              observed.final.get(task_id) or {}, observed.skews)
            if limits.get("max_running"):
                groups[(f"{kind} queue", limits["max_running"])] += spans
            key = observed.concurrency_keys.get(task_id)
            if key and limits.get("max_running_per_key"):
                groups[(f"{kind} key {key}", limits["max_running_per_key"])] += spans
        for (what, limit), spans in sorted(groups.items()):
            most, at = most_at_once(spans)
            peaks[what] = (most, limit)
            if most > limit:
                over.append((what, most, limit, at))
    return peaks, over
