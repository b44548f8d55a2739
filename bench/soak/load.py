"""The soak's load: a seeded plan of tasks of every kind spread over the run, pushed by one
thread that rides out Redis faults without ever writing a task twice or counting one that was
not written."""

import threading
import time
import uuid

import redis

from django_blueque.core.client import priority_field

# kind -> (queue, share of the tasks)
KINDS = {"short": ("soak.short", 0.81), "sleep": ("soak.sleep", 0.03),
         "eta": ("soak.eta", 0.07), "flaky": ("soak.flaky", 0.07),
         "doomed": ("soak.doomed", 0.02)}


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
        self.errors = 0
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
        finally:
            self.done.set()

    def _push(self, kind, batch):
        queue = KINDS[kind][0]
        task = self.registry.task_for_queue(queue)
        parameters = [task.encode((), arguments) for arguments in batch]
        ids = [str(uuid.uuid4()) for _ in batch]
        # a third of the batches with a priority: the prioritized set under the same faults
        fields = {**task.task_fields(), **priority_field(self.rng.choice((None, 5, -5)))}
        if kind == "eta":
            writes = [(lambda i=i: self.protocol.schedule(
                queue, parameters[i], time.time() + self.rng.uniform(*self.eta_range),
                fields, ids[i]), [ids[i]]) for i in range(len(ids))]
        else:
            writes = [(lambda: self.protocol.enqueue(queue, parameters, fields, ids), ids)]
        for write, written_ids in writes:
            self._write_surely(write, written_ids, kind)

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
