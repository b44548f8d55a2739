"""What the soak concludes, from what the task processes wrote to the side channel, what the
harness did (tasks enqueued, processes killed, outages) and the tasks' final hashes in Redis.
Pure functions of those records, so the judgement can be checked on made-up runs."""

import re
from collections import defaultdict
from dataclasses import dataclass, field

from django_blueque.core.maintenance import CONFIRM_SECONDS

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

    tasks: dict  # task id -> kind ("short", "sleep", "eta", "flaky", "doomed")
    final: dict  # task id -> its hash in Redis at the end ({} if it is gone)
    killed: dict = field(default_factory=dict)  # task id -> pids of it the soak killed
    # (fault time, task id): a task the soak took from a live process (killed, or its listener
    # killed or stopped while it held the task: reserved, or taken and not yet handed to a
    # task process); its recovery is the time to its next start
    displaced: list = field(default_factory=list)
    outages: list = field(default_factory=list)  # (start, end) while Redis was away
    stray: list = field(default_factory=list)  # ids still in a pending list or schedule


@dataclass
class Verdict:
    enqueued: int = 0
    completed: int = 0
    failed_by_design: int = 0
    lost: list = field(default_factory=list)  # (task id, why)
    stuck: list = field(default_factory=list)  # (task id, status)
    run_twice: list = field(default_factory=list)  # (task id, why)
    cut_short: list = field(default_factory=list)  # (task id, attempt, pid)
    attempts_without_run: list = field(default_factory=list)  # (task id, attempts, runs)
    recoveries: list = field(default_factory=list)  # (seconds or None, task id)

    @property
    def longest_recovery(self):
        times = [seconds for seconds, _ in self.recoveries if seconds is not None]
        return max(times) if times else 0.0

    @property
    def never_recovered(self):
        return [task_id for seconds, task_id in self.recoveries if seconds is None]


def overlap(start, end, windows):
    return sum(max(0.0, min(end, b) - max(start, a)) for a, b in windows)


def judge(observed, events):
    verdict = Verdict(enqueued=len(observed.tasks))
    starts, ends = defaultdict(list), defaultdict(list)
    for event in events:
        (starts if event.kind == "start" else ends)[event.task_id].append(event)
    for task_id, kind in observed.tasks.items():
        _judge_outcome(verdict, task_id, kind, observed.final.get(task_id) or {},
                       ends[task_id])
        _judge_runs(verdict, task_id, starts[task_id], ends[task_id],
                    observed.killed.get(task_id, ()))
        try:
            attempts = int((observed.final.get(task_id) or {}).get("attempts") or 0)
        except ValueError:
            attempts = 0
        runs = len({event.attempt for event in starts[task_id]})
        if attempts > runs and task_id not in observed.killed:
            verdict.attempts_without_run.append((task_id, attempts, runs))
    for task_id in observed.stray:
        verdict.stuck.append((task_id, "id left in a pending list or schedule"))
    for at, task_id in observed.displaced:
        verdict.recoveries.append((_recovery(at, task_id, observed, starts, ends), task_id))
    return verdict


def _judge_outcome(verdict, task_id, kind, final, ends):
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
    else:
        verdict.lost.append((task_id, f"failed: {final.get('error_type', '')}: "
                                      f"{final.get('error', '')}"[:200]))


def _judge_runs(verdict, task_id, starts, ends, killed_pids):
    """A run to the end twice (not counted for a task whose process the soak killed, which may
    have died between its end and the record of it), and runs that stopped before their end
    though the soak did not kill their process."""
    ended = {(end.attempt, end.pid) for end in ends}
    for start in starts:
        if (start.attempt, start.pid) not in ended and start.pid not in killed_pids:
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
    """Seconds from the fault to the task's next start, less the time Redis was away and the
    reaper's confirmation after it (once Redis takes writes again, it watches a lapsed lease
    afresh for CONFIRM_SECONDS, the chance a living process gets to renew: by design); None
    if it never started again and had no run reach its end (one may end just as the fault
    hits: then there is nothing to recover)."""
    later = [start.at for start in starts[task_id] if start.at >= at]
    if later:
        away = _merged([(start, end + CONFIRM_SECONDS) for start, end in observed.outages])
        return max(0.0, min(later) - at - overlap(at, min(later), away))
    ended = ends[task_id] and (observed.final.get(task_id) or {}).get("status") in FINAL
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
