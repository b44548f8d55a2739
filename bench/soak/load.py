"""The soak's load: a seeded plan of tasks of every kind spread over the run, pushed by one
thread that rides out Redis faults without ever writing a task twice or counting one that was
not written."""

import json
import threading
import time
import uuid

import redis

from django_blueque.core.admission import concurrency_fields
from django_blueque.core.client import priority_field
from django_blueque.core.protocol_workflows import WorkflowTask
from django_blueque.core.timings import DEFAULT as TIMINGS

# kind -> (queue, share of the tasks)
KINDS = {"short": ("soak.short", 0.755), "sleep": ("soak.sleep", 0.03),
         "eta": ("soak.eta", 0.07), "flaky": ("soak.flaky", 0.07),
         "doomed": ("soak.doomed", 0.02), "gil": ("soak.gil", 0.0005),
         "workflow": ("soak.step", 0.01), "limited": ("soak.limited", 0.02),
         "keyed": ("soak.keyed", 0.02), "checkpoint": ("soak.checkpoint", 0.005)}
LONG_KINDS = ("sleep", "limited", "keyed", "checkpoint")
"""The kinds that run for seconds: what the faults on running tasks wait for."""
CONCURRENCY_KEYS = 3
"""How many concurrency keys the "keyed" tasks share (task n has key n % CONCURRENCY_KEYS)."""

GIL_SECONDS = int(TIMINGS.lease + TIMINGS.confirm + 2)
"""How long a "gil" task holds its process's GIL: past its lease and the reaper's confirmation,
so only its listener's renewals keep it from being run twice."""
WORKFLOW_WIDTH = 3
"""A planned workflow: a step, a group of this many, a step after the group."""
EXTRA_EVERY = 3.0
"""Seconds between two sleeping tasks pushed once the plan is done and faults still come."""


def size(item):
    """How many tasks a planned item writes (a workflow writes all its steps)."""
    return WORKFLOW_WIDTH + 2 if item[1] == "workflow" else 1


def plan(rng, total, window, short):
    """[(offset in seconds, kind, task arguments)] in time order: ``total`` tasks, each at a
    seeded random moment of the window."""
    kinds = list(KINDS)
    # a short run has more, shorter sleeping tasks, so that each fault meets one running
    weights = [KINDS[kind][1] * (2 if short and kind == "sleep" else 1) for kind in kinds]
    shortest, longest = (2.0, 8.0) if short else (1.0, 20.0)
    items = []
    for n in range(total):
        # every kind at least once, then at random by its share
        kind = kinds[n] if n < len(kinds) else rng.choices(kinds, weights)[0]
        arguments = {"n": n}
        if kind == "short":
            arguments["ms"] = rng.randint(0, 20)
        elif kind == "sleep":
            arguments["seconds"] = round(rng.uniform(shortest, longest), 2)
        elif kind == "flaky":
            arguments["succeed_on"] = rng.choice((2, 3))
        elif kind == "gil":
            arguments["seconds"] = GIL_SECONDS
        elif kind in ("limited", "keyed"):
            arguments["seconds"] = round(rng.uniform(0.3, 1.5), 2)
        items.append((rng.uniform(0, window), kind, arguments))
    items.sort(key=lambda item: item[0])
    return items


class Pusher(threading.Thread):
    """Writes the planned tasks with ids of its own choosing. When a write fails, it cannot
    know whether Redis applied it (a script or a transaction is all or nothing): it waits
    until Redis answers, counts the tasks whose hash exists, and writes only the others."""

    def __init__(self, rng, items, started_at, protocol, registry, eta_range):
        super().__init__(name="soak-pusher", daemon=True)
        self.rng, self.items, self.t0 = rng, items, started_at
        self.protocol, self.registry, self.eta_range = protocol, registry, eta_range
        self.tasks = {}  # task id -> kind, once written
        self.edges = {}  # task id of a workflow step -> the ids it depends on
        self.concurrency_keys = {}  # task id of a "keyed" task -> its concurrency key
        self.errors = 0
        self.extra = 0  # sleeping tasks pushed after the plan, while faults were still coming
        self.planned_done = threading.Event()
        self.done = threading.Event()
        self.stopping = threading.Event()

    def run(self):
        index = 0
        try:
            while index < len(self.items) and not self.stopping.is_set():
                elapsed = time.time() - self.t0
                due = []
                while index < len(self.items) and self.items[index][0] <= elapsed:
                    due.append(self.items[index])
                    index += 1
                groups = {}
                for _, kind, arguments in due:
                    groups.setdefault(kind, []).append(arguments)
                for kind, batch in groups.items():
                    self._push(kind, batch)
                time.sleep(0.2)
            self.planned_done.set()
            # the faults often outlast the plan (each waits for its effect): keep a sleeping
            # task coming, so that a fault on a running task always finds one
            while not self.stopping.wait(EXTRA_EVERY):
                self._push("sleep", [{"n": len(self.items) + self.extra,
                                      "seconds": round(self.rng.uniform(3.0, 8.0), 2)}])
                self.extra += 1
        finally:
            self.done.set()

    def _push(self, kind, batch):
        if kind == "workflow":
            for arguments in batch:
                self._push_workflow(arguments["n"])
            return
        if kind == "keyed" and len(batch) > 1:  # a key per task: one write each
            for arguments in batch:
                self._push(kind, [arguments])
            return
        queue = KINDS[kind][0]
        task = self.registry.task_for_queue(queue)
        parameters = [task.encode((), arguments) for arguments in batch]
        ids = [str(uuid.uuid4()) for _ in batch]
        # a third of the batches with a priority: the prioritized set under the same faults
        fields = {**task.task_fields(), **priority_field(self.rng.choice((None, 5, -5)))}
        key = f"key-{batch[0]['n'] % CONCURRENCY_KEYS}" if kind == "keyed" else None
        fields.update(concurrency_fields(key))
        if kind == "eta":
            writes = [(lambda i=i: self.protocol.schedule(
                queue, parameters[i], time.time() + self.rng.uniform(*self.eta_range),
                fields, ids[i]), [ids[i]]) for i in range(len(ids))]
        else:
            writes = [(lambda: self.protocol.enqueue(queue, parameters, fields, ids), ids)]
        for write, written_ids in writes:
            self._write_surely(write, written_ids, kind)
        if key:
            self.concurrency_keys[ids[0]] = key

    def _push_workflow(self, n):
        """A chain: a step, a group of WORKFLOW_WIDTH, a step after it, in one transaction."""
        queue = KINDS["workflow"][0]
        task = self.registry.task_for_queue(queue)
        first, last = str(uuid.uuid4()), str(uuid.uuid4())
        middle = [str(uuid.uuid4()) for _ in range(WORKFLOW_WIDTH)]
        edges = {first: [], **{task_id: [first] for task_id in middle}, last: middle}
        steps = [WorkflowTask(queue, task.encode((), {"n": n, "ms": 5}), {
            **task.task_fields(), **({"depends_on": json.dumps(deps)} if deps else {})},
            task_id) for task_id, deps in edges.items()]
        self._write_surely(
            lambda: self.protocol.workflows.enqueue_workflow(str(uuid.uuid4()), steps),
            list(edges), "workflow")
        self.edges.update(edges)

    def _write_surely(self, write, ids, kind):
        while True:
            try:
                write()
                break
            except redis.RedisError:
                self.errors += 1
                time.sleep(0.2)
                present = self._present(ids)
                if len(present) == len(ids):
                    break
                if present:  # cannot happen with an atomic write; never write one twice
                    raise RuntimeError(f"a write of {len(ids)} tasks was applied in part")
        for task_id in ids:
            self.tasks[task_id] = kind

    def _present(self, ids):
        """The ids whose hash exists, asked until Redis answers."""
        while True:
            try:
                with self.protocol.redis.pipeline(transaction=False) as pipe:
                    for task_id in ids:
                        pipe.exists(self.protocol.keys.task(task_id))
                    return [task_id for task_id, n in zip(ids, pipe.execute(), strict=True)
                            if n]
            except redis.RedisError:
                time.sleep(0.5)
