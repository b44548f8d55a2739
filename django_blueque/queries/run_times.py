"""How long a queue's recent runs took, from the ``started`` and ``finished`` fields each run
already records: the metrics' run-time histograms. Two pipelines, however many queues."""

from ..core import keys as k
from ..core.values import finite_number

RUN_TIME_WINDOW = 50
"""Runs read per queue and outcome: the newest complete and the newest failed tasks."""

RUN_TIME_BUCKETS = (1, 5, 15, 60, 300, 900, 1800, 3600, 7200, 14400, 43200, 86400)
"""Upper bounds (seconds) of the histograms' buckets: long tasks, seconds to a day."""


def recent_run_times(reader, queues):
    """{queue: {'complete': [seconds], 'failed': [seconds]}} of the RUN_TIME_WINDOW newest
    finished tasks of each queue and outcome; a task without both times (a blueque 1.0 run,
    a cancel before its start) is left out."""
    lists = [(queue, outcome) for queue in queues for outcome in (k.COMPLETE, k.FAILED)]
    ids = reader.read([("lrange", reader.keys.finished(queue, outcome), 0, RUN_TIME_WINDOW - 1)
                       for queue, outcome in lists])
    owners = [(queue, outcome) for (queue, outcome), found in zip(lists, ids, strict=True)
              for _ in found]
    times = reader.read([("hmget", reader.keys.task(task_id), "started", "finished")
                         for found in ids for task_id in found])
    durations = {queue: {k.COMPLETE: [], k.FAILED: []} for queue in queues}
    for (queue, outcome), (started, finished) in zip(owners, times, strict=True):
        started, finished = finite_number(started), finite_number(finished)
        if started is not None and finished is not None and finished >= started:
            durations[queue][outcome].append(finished - started)
    return durations


def histogram(seconds):
    """(cumulative counts per RUN_TIME_BUCKETS bound, then +Inf; sum) of ``seconds``."""
    counts = [sum(1 for value in seconds if value <= bound) for bound in RUN_TIME_BUCKETS]
    return [*counts, len(seconds)], sum(seconds)
