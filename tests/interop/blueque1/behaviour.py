"""What blueque 1.0's unit tests pin, as black-box tests of its public API on a real Redis.

Written once, run twice by harness.py: against the real blueque 1.0.1 and against our engine
(through the ``blueque`` shim). So only ``blueque``'s 1.0 API, redis-py and the standard library
are used here. Where our engine writes more than 1.0 (the protocol's extension keys and
fields, listed in the README), these tests accept exactly those additions and nothing else.
"""

import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from unittest import TestCase

import blueque
import redis
from blueque.forking_runner import ForkingRunner

Q = "some.queue"
TASK_ATTRIBUTES = ("id", "status", "queue", "parameters", "result", "error", "node", "pid",
                   "created", "updated")
V1_TASK_FIELDS = {"status", "queue", "parameters", "created", "updated", "eta", "node", "pid",
                  "result", "error", "reclaimed_node"}
# The protocol's extensions (README, "The protocol and its extensions"): a 1.0 reader ignores them.
EXTENSION_FIELDS = {"attempts", "retries", "backoff", "timeout", "retention", "lease", "started",
                    "finished", "expires", "progress", "progress_message", "error_type",
                    "traceback", "last_error", "cancel_requested", "priority", "unique_key",
                    "unique_until", "errors"}
EXTENSION_KEY_PREFIXES = ("blueque_listener_leases_", "blueque_listener_", "blueque_cancels_",
                          "blueque_lease_", "blueque_due_queues", "blueque_expiring_queues",
                          "blueque_reaper_clock", "blueque_throughput_", "blueque_bulk_",
                          "blueque_periodic_", "blueque_unique_")


def task_key(task_id):
    return f"blueque_task_{task_id}"


def reserved_key(listener_id):
    return f"blueque_reserved_tasks_{Q}_{listener_id}"


def run_task(task):
    """The runner's callback: what 1.0 records as the result, or its error via str(e)."""
    if task.parameters.startswith("fail"):
        raise RuntimeError(f"boom: {task.parameters}")
    return f"ran:{task.parameters}"


def dead_pid():
    """The pid of a process of this host that has exited (and been waited for)."""
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    return pid


def wait_until(condition, timeout, what):
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


class BlueQueBehaviour(TestCase):
    def setUp(self):
        self.url = os.environ["REDIS_URI"]
        self.r = redis.Redis.from_url(self.url, decode_responses=True)
        self.r.flushdb()
        self.client = blueque.Client(self.url)
        self.queue = self.client.get_queue(Q)
        self.host = socket.getfqdn()
        self.my_id = f"{self.host}_{os.getpid()}"

    def tearDown(self):
        self.r.close()

    # -- helpers -------------------------------------------------------------------------------

    def assert_fields(self, task_id, expected, times=("created", "updated")):
        """The task hash holds exactly ``expected`` among 1.0's fields (with ``times`` parsed as
        floats rather than compared), and otherwise only documented extension fields."""
        fields = self.r.hgetall(task_key(task_id))
        v1 = {name: value for name, value in fields.items() if name in V1_TASK_FIELDS}
        self.assertEqual(set(expected) | set(times), set(v1), fields)
        for name in times:
            float(v1.pop(name))
        self.assertEqual(expected, v1)
        self.assertEqual(set(), set(fields) - V1_TASK_FIELDS - EXTENSION_FIELDS)
        return fields

    def assert_keys(self, expected):
        """The database holds exactly ``expected`` among 1.0's keys, plus extension keys only."""
        keys = set(self.r.keys("*"))
        self.assertEqual(set(expected),
                         {key for key in keys if not key.startswith(EXTENSION_KEY_PREFIXES)})

    def register_dead_listener(self, pid=None, host=None):
        """A listener registered as 1.0 registers (SADD, ZINCRBY +1) whose process is gone."""
        listener_id = f"{host or self.host}_{pid or dead_pid()}"
        self.r.sadd(f"blueque_listeners_{Q}", listener_id)
        self.r.zincrby("blueque_queues", 1, Q)
        return listener_id

    def reserve_as_v1(self, listener_id, parameters="PARAMS"):
        """A task reserved by a 1.0 listener: RPOPLPUSH, then HSET status, node, updated."""
        task_id = self.queue.enqueue(parameters)
        self.assertEqual(task_id, self.r.rpoplpush(f"blueque_pending_tasks_{Q}",
                                                   reserved_key(listener_id)))
        self.r.hset(task_key(task_id), mapping={"status": "reserved", "node": listener_id,
                                                "updated": time.time()})
        return task_id

    def start_runner(self):
        """A ForkingRunner on Q in a child process; stopped (SIGTERM, then SIGKILL) at cleanup."""
        pid = os.fork()
        if pid == 0:
            try:
                ForkingRunner(blueque.Client(self.url), Q, run_task).run()
            finally:
                os._exit(0)

        def stop():
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + 10
            while os.waitpid(pid, os.WNOHANG) == (0, 0):
                if time.monotonic() > deadline:
                    os.kill(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
                    break
                time.sleep(0.05)

        self.addCleanup(stop)
        return pid

    # -- producers -----------------------------------------------------------------------------

    def test_enqueue_writes_a_pending_task_and_returns_its_uuid4(self):
        before = time.time()
        task_id = self.queue.enqueue("some parameter")
        after = time.time()

        self.assertIsInstance(task_id, str)
        self.assertEqual(4, uuid.UUID(task_id).version)
        self.assertEqual(task_id, str(uuid.UUID(task_id)))
        fields = self.assert_fields(
            task_id, {"status": "pending", "queue": Q, "parameters": "some parameter"})
        self.assertEqual(fields["created"], fields["updated"])
        self.assertTrue(before <= float(fields["created"]) <= after)
        self.assertEqual([task_id], self.r.lrange(f"blueque_pending_tasks_{Q}", 0, -1))
        self.assertEqual(0.0, self.r.zscore("blueque_queues", Q))
        self.assert_keys({task_key(task_id), f"blueque_pending_tasks_{Q}", "blueque_queues"})

    def test_tasks_are_taken_in_fifo_order(self):
        ids = [self.queue.enqueue(name) for name in ("first", "second", "third")]
        self.assertEqual(ids[::-1], self.r.lrange(f"blueque_pending_tasks_{Q}", 0, -1))

        listener = self.client.get_listener(Q)
        taken = [listener.listen() for _ in ids]

        self.assertEqual(ids, [task.id for task in taken])
        self.assertEqual(["first", "second", "third"], [task.parameters for task in taken])
        self.assertEqual(ids[::-1], self.r.lrange(reserved_key(self.my_id), 0, -1))

    def test_schedule_in_the_future_writes_a_scheduled_task(self):
        eta = time.time() + 3600
        task_id = self.queue.schedule("some parameters", eta)

        self.assert_fields(task_id, {"status": "scheduled", "queue": Q,
                                     "parameters": "some parameters"},
                           times=("created", "updated", "eta"))
        self.assertEqual(eta, float(self.r.hget(task_key(task_id), "eta")))
        self.assertEqual(eta, self.r.zscore(f"blueque_scheduled_tasks_{Q}", task_id))
        self.assertEqual(0.0, self.r.zscore("blueque_queues", Q))
        self.assert_keys({task_key(task_id), f"blueque_scheduled_tasks_{Q}", "blueque_queues"})
        self.assertEqual("scheduled", self.client.get_task(task_id).status)

    def test_schedule_in_the_past_just_enqueues(self):
        task_id = self.queue.schedule("some parameters", time.time() - 10)

        self.assert_fields(task_id, {"status": "pending", "queue": Q,
                                     "parameters": "some parameters"})
        self.assertEqual([task_id], self.r.lrange(f"blueque_pending_tasks_{Q}", 0, -1))
        self.assertFalse(self.r.exists(f"blueque_scheduled_tasks_{Q}"))

    def test_enqueue_due_tasks_moves_only_the_due_ones_and_keeps_their_eta(self):
        due_eta = time.time() + 0.5
        due = self.queue.schedule("due", due_eta)
        later = self.queue.schedule("later", time.time() + 3600)
        wait_until(lambda: time.time() > due_eta, 5, "the eta to pass")

        self.queue.enqueue_due_tasks()

        fields = self.assert_fields(due, {"status": "pending", "queue": Q, "parameters": "due"},
                                    times=("created", "updated", "eta"))
        self.assertGreaterEqual(float(fields["updated"]), due_eta)
        self.assertEqual([due], self.r.lrange(f"blueque_pending_tasks_{Q}", 0, -1))
        self.assertEqual([later], self.r.zrange(f"blueque_scheduled_tasks_{Q}", 0, -1))
        self.assertEqual("scheduled", self.client.get_task(later).status)

    # -- listeners -----------------------------------------------------------------------------

    def test_a_listener_registers_as_host_underscore_pid(self):
        self.client.get_listener(Q)

        self.assertEqual({self.my_id}, self.r.smembers(f"blueque_listeners_{Q}"))
        self.assertEqual(1.0, self.r.zscore("blueque_queues", Q))
        self.assert_keys({f"blueque_listeners_{Q}", "blueque_queues"})

    def test_listen_reserves_the_task_for_this_listener(self):
        task_id = self.queue.enqueue("PARAMS")
        listener = self.client.get_listener(Q)
        before = time.time()

        task = listener.listen()

        self.assertEqual((task_id, "reserved", self.my_id, "PARAMS", Q),
                         (task.id, task.status, task.node, task.parameters, task.queue))
        fields = self.assert_fields(task_id, {"status": "reserved", "queue": Q,
                                              "parameters": "PARAMS", "node": self.my_id})
        self.assertGreaterEqual(float(fields["updated"]), before)
        self.assertEqual([task_id], self.r.lrange(reserved_key(self.my_id), 0, -1))
        self.assertFalse(self.r.exists(f"blueque_pending_tasks_{Q}"))

    def test_listen_waits_for_a_task(self):
        listener = self.client.get_listener(Q)
        enqueued = []
        timer = threading.Timer(0.5, lambda: enqueued.append(self.queue.enqueue("late")))
        timer.start()
        try:
            task = listener.listen()
            timer.join(10)  # its enqueue() may not have returned yet when the listener has it
        finally:
            timer.cancel()
        self.assertEqual(enqueued, [task.id])

    # -- processors ----------------------------------------------------------------------------

    def test_start_then_complete(self):
        task_id = self.queue.enqueue("PARAMS")
        task = self.client.get_listener(Q).listen()
        processor = self.client.get_processor(task)
        pid = os.getpid()

        processor.start(pid)

        self.assertEqual({f"{self.my_id} {pid} {task_id}"},
                         self.r.smembers(f"blueque_started_tasks_{Q}"))
        self.assert_fields(task_id, {"status": "started", "queue": Q, "parameters": "PARAMS",
                                     "node": self.my_id, "pid": str(pid)})

        processor.complete("a result")

        self.assert_fields(task_id, {"status": "complete", "queue": Q, "parameters": "PARAMS",
                                     "node": self.my_id, "pid": str(pid), "result": "a result"})
        self.assertEqual([task_id], self.r.lrange(f"blueque_complete_tasks_{Q}", 0, -1))
        self.assertFalse(self.r.exists(reserved_key(self.my_id), f"blueque_started_tasks_{Q}"))
        finished = self.client.get_task(task_id)
        self.assertEqual(("complete", "a result", None), (finished.status, finished.result,
                                                          finished.error))

    def test_start_then_fail(self):
        task_id = self.queue.enqueue("PARAMS")
        task = self.client.get_listener(Q).listen()
        processor = self.client.get_processor(task)
        processor.start(os.getpid())

        processor.fail("error message")

        self.assert_fields(task_id, {"status": "failed", "queue": Q, "parameters": "PARAMS",
                                     "node": self.my_id, "pid": str(os.getpid()),
                                     "error": "error message"})
        self.assertEqual([task_id], self.r.lrange(f"blueque_failed_tasks_{Q}", 0, -1))
        self.assertFalse(self.r.exists(reserved_key(self.my_id), f"blueque_started_tasks_{Q}"))
        finished = self.client.get_task(task_id)
        self.assertEqual(("failed", None, "error message"),
                         (finished.status, finished.result, finished.error))

    # -- deleting ------------------------------------------------------------------------------

    def finished_task(self, outcome):
        task_id = self.queue.enqueue(outcome)
        processor = self.client.get_processor(self.client.get_listener(Q).listen())
        processor.start(os.getpid())
        getattr(processor, outcome)("x")
        return task_id

    def test_delete_finished_tasks(self):
        for outcome, key in (("complete", f"blueque_complete_tasks_{Q}"),
                             ("fail", f"blueque_failed_tasks_{Q}")):
            task_id = self.finished_task(outcome)
            self.queue.delete_task(self.client.get_task(task_id))
            self.assertFalse(self.r.exists(task_key(task_id), key))
            self.assertIsNone(self.client.get_task(task_id).status)

    def test_delete_refuses_unfinished_tasks_and_other_queues(self):
        done = self.finished_task("complete")
        task_id = self.queue.enqueue("PARAMS")
        with self.assertRaisesRegex(ValueError, "^Cannot delete task with status pending$"):
            self.queue.delete_task(self.client.get_task(task_id))
        other = self.client.get_queue("other.queue")
        with self.assertRaisesRegex(ValueError, f"^Task {done} is not in queue other.queue$"):
            other.delete_task(self.client.get_task(done))
        self.assertEqual("pending", self.client.get_task(task_id).status)
        self.assertEqual("complete", self.client.get_task(done).status)

    # -- tasks ---------------------------------------------------------------------------------

    def test_task_attributes_have_1_0_types_and_none_when_missing(self):
        task_id = self.finished_task("complete")
        task = self.client.get_task(task_id)

        types = {name: type(getattr(task, name)).__name__ for name in TASK_ATTRIBUTES}
        self.assertEqual({"id": "str", "status": "str", "queue": "str", "parameters": "str",
                          "result": "str", "error": "NoneType", "node": "str", "pid": "int",
                          "created": "float", "updated": "float"}, types)

        unknown = self.client.get_task("12345678-1234-1234-1234-123456781234")
        self.assertEqual("12345678-1234-1234-1234-123456781234", unknown.id)
        for name in TASK_ATTRIBUTES[1:]:
            self.assertIsNone(getattr(unknown, name), name)

    def test_task_attributes_are_read_only(self):
        task = self.client.get_task(self.queue.enqueue("PARAMS"))
        for name in TASK_ATTRIBUTES:
            with self.assertRaises(AttributeError, msg=name):
                setattr(task, name, "changed")
        self.assertEqual(("pending", "PARAMS"), (task.status, task.parameters))

    # -- orphans -------------------------------------------------------------------------------

    def test_claim_orphan_finds_nothing_without_other_listeners(self):
        listener = self.client.get_listener(Q)
        self.assertIsNone(listener.claim_orphan())
        self.assertEqual({self.my_id}, self.r.smembers(f"blueque_listeners_{Q}"))

    def test_claim_orphan_leaves_listeners_of_other_hosts_and_live_ones(self):
        elsewhere = self.register_dead_listener(pid=4321, host="other-host.example.com")
        elsewhere_task = self.reserve_as_v1(elsewhere)
        sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        self.addCleanup(sleeper.wait)
        self.addCleanup(sleeper.kill)
        alive = self.register_dead_listener(pid=sleeper.pid)
        alive_task = self.reserve_as_v1(alive)
        listener = self.client.get_listener(Q)

        self.assertIsNone(listener.claim_orphan())

        self.assertEqual({elsewhere, alive, self.my_id}, self.r.smembers(f"blueque_listeners_{Q}"))
        self.assertEqual(3.0, self.r.zscore("blueque_queues", Q))
        for listener_id, task_id in ((elsewhere, elsewhere_task), (alive, alive_task)):
            self.assertEqual([task_id], self.r.lrange(reserved_key(listener_id), 0, -1))
            self.assertEqual("reserved", self.client.get_task(task_id).status)
            self.assertFalse(self.r.hexists(task_key(task_id), "reclaimed_node"))

    def test_claim_orphan_unregisters_a_dead_listener_without_tasks(self):
        dead = self.register_dead_listener()
        listener = self.client.get_listener(Q)

        self.assertIsNone(listener.claim_orphan())

        self.assertEqual({self.my_id}, self.r.smembers(f"blueque_listeners_{Q}"))
        self.assertEqual(1.0, self.r.zscore("blueque_queues", Q))
        self.assertNotIn(dead, self.r.smembers(f"blueque_listeners_{Q}"))

    def test_claim_orphan_returns_the_reserved_task_of_a_dead_listener_on_this_host(self):
        dead = self.register_dead_listener()
        task_id = self.reserve_as_v1(dead)
        listener = self.client.get_listener(Q)

        orphan = listener.claim_orphan()

        self.assertEqual((task_id, "reserved", dead, "PARAMS"),
                         (orphan.id, orphan.status, orphan.node, orphan.parameters))
        self.assertEqual({self.my_id}, self.r.smembers(f"blueque_listeners_{Q}"))
        self.assertEqual(1.0, self.r.zscore("blueque_queues", Q))
        self.assertEqual(self.my_id, self.r.hget(task_key(task_id), "reclaimed_node"))
        self.assertIsNone(listener.claim_orphan())  # claimed once

        # and the claimer runs it, as 1.0's runner does
        processor = self.client.get_processor(orphan)
        processor.start(os.getpid())
        processor.complete("recovered")
        self.assertEqual("complete", self.client.get_task(task_id).status)
        self.assertFalse(self.r.exists(reserved_key(dead), f"blueque_started_tasks_{Q}"))

    def test_claim_orphan_returns_the_started_task_of_a_dead_listener(self):
        dead_task_pid = dead_pid()
        dead = self.register_dead_listener()
        task_id = self.reserve_as_v1(dead)
        self.r.sadd(f"blueque_started_tasks_{Q}", f"{dead} {dead_task_pid} {task_id}")
        self.r.hset(task_key(task_id), mapping={"status": "started", "pid": dead_task_pid})
        listener = self.client.get_listener(Q)

        orphan = listener.claim_orphan()

        self.assertEqual((task_id, "started", dead, dead_task_pid),
                         (orphan.id, orphan.status, orphan.node, orphan.pid))
        self.assertEqual({self.my_id}, self.r.smembers(f"blueque_listeners_{Q}"))

    # -- the forking runner --------------------------------------------------------------------

    def test_the_runner_runs_the_orphans_of_dead_listeners_when_it_starts(self):
        dead = self.register_dead_listener()
        task_id = self.reserve_as_v1(dead, "orphan")

        self.start_runner()

        wait_until(lambda: self.client.get_task(task_id).status == "complete", 30,
                   "the orphan to be run")
        self.assertEqual("ran:orphan", self.client.get_task(task_id).result)
        self.assertNotIn(dead, self.r.smembers(f"blueque_listeners_{Q}"))
        self.assertFalse(self.r.exists(reserved_key(dead), f"blueque_started_tasks_{Q}"))
        # and then it listens
        later = self.queue.enqueue("later")
        wait_until(lambda: self.client.get_task(later).status == "complete", 30,
                   "a new task to be run")

    def test_fork_task_runs_the_task_in_a_child_and_returns_its_pid(self):
        runner = ForkingRunner(self.client, Q, run_task)
        listener = self.client.get_listener(Q)
        for parameters, outcome, field, value in (
                ("PARAMS", "complete", "result", "ran:PARAMS"),
                ("fail please", "failed", "error", "boom: fail please")):
            task_id = self.queue.enqueue(parameters)

            pid = runner.fork_task(listener.listen())

            self.assertNotEqual(os.getpid(), pid)
            self.assertEqual((pid, 0), os.waitpid(pid, 0))
            task = self.client.get_task(task_id)
            self.assertEqual((outcome, pid, value), (task.status, task.pid, getattr(task, field)))
            self.assertFalse(self.r.exists(reserved_key(self.my_id), f"blueque_started_tasks_{Q}"))

    def test_client_passes_keyword_arguments_to_redis(self):
        client = blueque.Client(self.url, socket_timeout=5, health_check_interval=1)
        task_id = client.get_queue(Q).enqueue("PARAMS")
        self.assertEqual("PARAMS", client.get_task(task_id).parameters)
