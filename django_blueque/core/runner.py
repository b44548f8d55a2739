"""The forking runner: a listener that runs up to N tasks at a time, one forked process each.

One thread, one ``select()``: the listener waits at once on a blocking peek per queue
(``BLMOVE pending pending RIGHT RIGHT``, which returns as soon as the list has an id and leaves
it as it was), on its children's exits and on signals (both through a wake-up pipe), and on the
next timer (heartbeat, timeouts, kill escalations). So it sends nothing while idle but its
heartbeat, starts a task within milliseconds of its enqueue, and notices a child's death at once.
The task itself is then reserved by the atomic ``reserve`` script, its start recorded by the
listener, and handed through a pipe to a task process forked ahead while the listener was idle
(a fork costs milliseconds here; it is kept off the way from enqueue to the task's code).

A task's process renews its own lease from a thread, so it keeps running, and records its own
end, even if its listener dies; it kills itself if it ever loses the lease (the reaper handed
its task to someone else). The listener records the end of a child that died without
reporting, guarded by the reservation token so a result already recorded is never overwritten.

Stopping: the first SIGTERM or SIGINT makes the listener take no new task and wait for its
running tasks to end (waiting is the one way that never repeats hours of work). A second one
stops at once: tasks it reserved but had not started go back to the queue, and running ones are
left to finish in their own processes, which hold their own leases and record their own results;
if they die, the reaper recovers their tasks after their lease expires.
"""

import json
import logging
import os
import random
import select
import signal
import socket
import sys
import threading
import time
import traceback

import redis

from . import keys as k
from .client import Task
from .context import RunningTask, StopRequested, set_current_task
from .protocol import HEARTBEAT_TTL, new_token

logger = logging.getLogger("django_blueque.listener")
task_logger = logging.getLogger("django_blueque.task")

BLOCK_SECONDS = 60
"""How long one blocking peek lasts before it is renewed (the only other idle command)."""

RECORD_PATIENCE = 300.0
"""Seconds a task's process keeps trying to record its end while Redis is unreachable."""

CONNECTION_ERRORS = (redis.ConnectionError, redis.TimeoutError)


def encode_result(result):
    """A task's return value as a wire string: strings (and bytes, ints, floats, as blueque 1.0
    accepted) as they are, anything else as JSON (blueque 1.0 failed on None or a dict)."""
    if isinstance(result, (str, bytes, int, float)) and not isinstance(result, bool):
        return result
    try:
        return json.dumps(result)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"the task returned a {type(result).__name__} that cannot be encoded "
                        f"as JSON: {exc}") from None


def describe_exit(status):
    """What the exit status of a child that did not report says, in words."""
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = "unknown"
        return f"process killed by signal {number} ({name})"
    code = os.waitstatus_to_exitcode(status)
    if code:
        return f"process exited with status {code} without reporting a result"
    return "process exited without reporting a result"


def error_fields(exc):
    """(message, qualified type, traceback) of an exception, for the task hash."""
    kind = type(exc)
    qualified = f"{kind.__module__}.{kind.__qualname__}"
    return str(exc) or kind.__name__, qualified, traceback.format_exc()


class _Child:
    __slots__ = ("pid", "queue", "task_id", "token", "deadline", "timeout", "stop_reason",
                 "kill_at", "began")

    def __init__(self, pid, queue, task_id, token, timeout):
        self.pid, self.queue, self.task_id, self.token = pid, queue, task_id, token
        self.began = time.monotonic()
        self.timeout = float(timeout) if timeout else None
        self.deadline = self.began + self.timeout if self.timeout else None
        self.stop_reason = None
        self.kill_at = None


class _Waiter:
    """A connection holding a blocking peek on one queue's pending list."""

    def __init__(self, client, queue):
        self._pool = client.redis.connection_pool
        self.key = client.keys.pending(queue)
        self.conn = None
        self.armed = False

    def arm(self):
        if self.armed:
            return
        if self.conn is None:
            self.conn = self._pool.make_connection()
        self.conn.send_command("BLMOVE", self.key, self.key, "RIGHT", "RIGHT", BLOCK_SECONDS)
        self.armed = True

    def fileno(self):
        # redis-py keeps the socket here; select() needs its descriptor.
        return self.conn._sock.fileno()

    def settle(self):
        """Read the peek's reply (its value is not needed: the id stays in the list)."""
        self.armed = False
        try:
            self.conn.read_response()
        except CONNECTION_ERRORS:
            self.close()
            raise

    def close(self):
        if self.conn is not None:
            self.conn.disconnect()
        self.conn = None
        self.armed = False


class ForkingRunner:
    """blueque 1.0's ``ForkingRunner(client, queue, callback).run()``, extended.

    ``queue`` may be a list of queues. ``callback(task)`` runs in a forked process and returns
    the result (a string, or anything JSON can encode). Keyword options: ``concurrency`` (tasks
    at once), ``burst`` (return once the queues are empty and nothing runs), ``max_tasks``,
    ``kill_grace`` (seconds between SIGTERM and SIGKILL when stopping a task), ``retention``
    (default seconds to keep finished tasks), ``duties`` (a callable run every
    ``duties_interval`` seconds in the listener, e.g. the scheduler and the reaper),
    ``before_fork()`` (run in the listener before each fork, e.g. to close database
    connections a child must not inherit) and ``on_task_end(task, outcome, value, error_type)``
    (run in the task's process once its end is recorded; outcome is 'complete', 'failed',
    'retry' or 'stale').
    """

    def __init__(self, client, queue, task_callback, concurrency=1, *, burst=False,
                 max_tasks=None, kill_grace=10.0, retention=None, duties=None,
                 duties_interval=5.0, heartbeat_interval=HEARTBEAT_TTL / 3, before_fork=None,
                 on_task_end=None):
        self._client = client
        self._protocol = client.protocol
        self.queues = [queue] if isinstance(queue, str) else list(queue)
        for name in self.queues:
            if not k.valid_name(name):
                raise ValueError(f"invalid queue name {name!r}")
        if not self.queues:
            raise ValueError("a runner needs at least one queue")
        if int(concurrency) < 1:
            raise ValueError(f"concurrency must be at least 1, not {concurrency}")
        self._callback = task_callback
        self.concurrency = int(concurrency)
        self.burst = burst
        self.max_tasks = max_tasks
        self.kill_grace = kill_grace
        self.retention = retention
        self._duties = duties
        self._duties_interval = duties_interval
        self._heartbeat_interval = heartbeat_interval
        self._before_fork = before_fork
        self._on_task_end = on_task_end
        self.listener_id = None
        self.children = {}
        self.tasks_taken = 0
        self.stopped_cleanly = True
        self._stops = 0
        self._backlog = []
        self._waiters = {}
        self._wake_r = self._wake_w = None
        self._next_beat = self._next_duties = 0.0
        self._sent_info = None
        self._spare = None  # (pid, pipe) of a task process forked ahead, waiting for a task
        self._rotation = 0

    # -- the listener's loop -----------------------------------------------------------------

    def run(self):
        """Listen until stopped (or drained in burst mode); returns True on a clean stop."""
        self.listener_id = f"{socket.getfqdn()}_{os.getpid()}"
        self._started_at = time.time()
        self._waiters = {queue: _Waiter(self._client, queue) for queue in self.queues}
        previous = self._install_signals()
        logger.info("listener %s started on %s with concurrency %d", self.listener_id,
                    ", ".join(self.queues), self.concurrency)
        try:
            self._loop()
        finally:
            self._shutdown()
            self._restore_signals(previous)
        return self.stopped_cleanly

    def stop(self):
        """Ask the loop to stop, as SIGTERM does (a second call stops at once)."""
        self._stops += 1
        if self._wake_w is not None:
            try:
                os.write(self._wake_w, b"s")
            except OSError:
                pass

    def _accepting(self):
        return self._stops == 0 and (self.max_tasks is None or self.tasks_taken < self.max_tasks)

    def _loop(self):
        backoff = 0.0
        while True:
            self._collect_children()
            if self._stops >= 2:
                self.stopped_cleanly = not self.children
                return
            if not self._accepting():
                self._close_waiters()
                self._drop_spare()
                if not self.children:
                    return
            try:
                self._flush_backlog()
                current = time.monotonic()
                if current >= self._next_beat:
                    self._beat(current)
                if self._duties and current >= self._next_duties:
                    self._run_duties(current)
                self._enforce_deadlines(current)
                empty = self._take_tasks() if self._accepting() else []
                if (self.burst and not self.children and self._accepting()
                        and all(q in empty or self._waiters[q].armed for q in self.queues)):
                    logger.info("listener %s: queues drained, burst done", self.listener_id)
                    return
                for queue in empty:
                    self._waiters[queue].arm()
            except CONNECTION_ERRORS as exc:
                self._close_waiters()
                self._next_beat = 0.0  # re-register as soon as Redis answers again
                backoff = min(max(backoff * 2, 0.5), 10.0)
                logger.warning("listener %s: Redis unreachable (%s); retrying in %.1f s",
                               self.listener_id, exc, backoff)
                self._wait(backoff, [])
                continue
            if backoff:
                logger.info("listener %s: reconnected to Redis", self.listener_id)
                backoff = 0.0
            self._keep_spare()
            self._wait(self._next_wakeup() - time.monotonic(),
                       [w for w in self._waiters.values() if w.armed])

    def _wait(self, timeout, waiters):
        try:
            readable, _, _ = select.select([self._wake_r, *waiters], [], [], max(0.0, timeout))
        except (OSError, ValueError):
            readable = []  # a waiter's socket went away; the next round reconnects
        for ready in readable:
            if ready is self._wake_r:
                try:
                    while os.read(self._wake_r, 512):
                        pass
                except BlockingIOError:
                    pass
            else:
                try:
                    ready.settle()
                except CONNECTION_ERRORS:
                    pass

    def _next_wakeup(self):
        times = [self._next_beat]
        if self._duties:
            times.append(self._next_duties)
        if self._backlog:
            times.append(time.monotonic() + 1.0)
        for child in self.children.values():
            if child.deadline and not child.stop_reason:
                times.append(child.deadline)
            if child.kill_at:
                times.append(child.kill_at)
        return min(times)

    def _close_waiters(self):
        for waiter in self._waiters.values():
            waiter.close()

    # -- liveness ------------------------------------------------------------------------------

    def _beat(self, current):
        """Renew the lease; write the info hash when it changed or after a (re-)registration,
        and collect cancellations while tasks run: an idle beat is one ZADD per queue."""
        info = {"host": socket.getfqdn(), "pid": os.getpid(), "queues": ",".join(self.queues),
                "concurrency": self.concurrency, "running": len(self.children),
                "since": repr(self._started_at)}
        changed = info if info != self._sent_info else None
        registered, cancels = self._protocol.heartbeat(self.listener_id, self.queues, changed,
                                                       collect_cancels=bool(self.children))
        if registered and changed is None:
            self._protocol.heartbeat(self.listener_id, self.queues, info, collect_cancels=False)
        self._sent_info = info
        self._next_beat = current + self._heartbeat_interval
        for task_id in cancels:
            for child in self.children.values():
                if child.task_id == task_id and not child.stop_reason:
                    logger.info("task %s: cancellation requested, stopping pid %d", task_id,
                                child.pid)
                    self._stop_child(child, "cancelled", current)

    def _run_duties(self, current):
        self._next_duties = current + self._duties_interval
        try:
            self._duties()
        except CONNECTION_ERRORS:
            raise
        except Exception:
            logger.exception("listener %s: scheduler/reaper duties failed", self.listener_id)

    # -- children -----------------------------------------------------------------------------

    def _take_tasks(self):
        """Reserve and fork while slots are free, one task per queue in turn; returns the
        queues found empty."""
        empty = []
        queues = [queue for queue in self.queues[self._rotation:] + self.queues[:self._rotation]
                  if not self._waiters[queue].armed]  # armed: empty, and nothing came since
        self._rotation = (self._rotation + 1) % len(self.queues)
        while queues and len(self.children) < self.concurrency and self._accepting():
            for queue in list(queues):
                if len(self.children) >= self.concurrency or not self._accepting():
                    break
                token = new_token()
                taken = self._protocol.reserve(queue, self.listener_id, token)
                if taken is None:
                    queues.remove(queue)
                    empty.append(queue)
                elif taken[1] is None:
                    logger.warning("queue %s: dropped id %s with no pending task behind it",
                                   queue, taken[0])
                else:
                    self._fork(queue, taken[0], token, taken[1])
        return empty

    def _spawn(self):
        """Fork a task process that waits, on a pipe, for the task it is to run."""
        if self._before_fork:
            self._before_fork()
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(write_end)
            self._child_main(read_end)  # never returns
        os.close(read_end)
        return pid, write_end

    def _fork(self, queue, task_id, token, timeout):
        """Run a reserved task in a process: the spare one forked while the listener was idle
        (so the fork is not on the way from enqueue to the task's code), or a new one. The
        listener records the start with the process's pid on its own warm connection and hands
        it the task through the pipe: the code begins one round trip after the reservation."""
        self.tasks_taken += 1
        pid, write_end = self._spare or self._spawn()
        self._spare = None
        self.children[pid] = _Child(pid, queue, task_id, token, timeout)
        try:
            started = self._protocol.start(queue, task_id, self.listener_id, pid, token)
        except CONNECTION_ERRORS:
            os.close(write_end)  # the process exits unstarted; the task is retried
            self._backlog.append(lambda: self._protocol.finish(
                queue, task_id, self.listener_id, pid, token, k.FAILED,
                "could not start the task: Redis unreachable", "ListenerLost", "", True,
                self.retention))
            raise
        try:
            if isinstance(started, dict):
                _write_all(write_end, json.dumps({"queue": queue, "token": token,
                                                  "id": task_id, "fields": started}).encode())
                task_logger.info("task %s (%s) started in pid %d", task_id, queue, pid)
            else:
                task_logger.info("task %s (%s) not started: %s", task_id, queue,
                                 "cancelled" if started == -1 else "no longer reserved here")
        except OSError:
            pass  # the process died already; its exit status tells how
        finally:
            os.close(write_end)

    def _keep_spare(self):
        """Have a spare task process ready while a slot is free (not in burst mode, where the
        listener is about to exit)."""
        if (self._spare is None and not self.burst and self._accepting()
                and len(self.children) < self.concurrency):
            self._spare = self._spawn()

    def _drop_spare(self):
        """Let the spare process go: on end of file it exits at once, unused."""
        if self._spare is not None:
            pid, write_end = self._spare
            self._spare = None
            os.close(write_end)
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass

    def _collect_children(self):
        """Reap every exited child (PID 1 here does not reap zombies) and record the end of
        those that died without reporting."""
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if self._spare is not None and pid == self._spare[0]:
                os.close(self._spare[1])  # it died unused: another is forked when needed
                self._spare = None
                continue
            child = self.children.pop(pid, None)
            if child is not None:
                self._child_ended(child, status)

    def _child_ended(self, child, status):
        elapsed = time.monotonic() - child.began
        if status == 0:
            # a task's process exits 0 only once its end is recorded (or it was not its to run)
            task_logger.info("task %s ended in %.3f s", child.task_id, elapsed)
            return
        if child.stop_reason == "cancelled":
            error, kind, retryable = "cancelled", "Cancelled", False
        elif child.stop_reason == "timeout":
            error, kind, retryable = f"timed out after {child.timeout:g} s", "Timeout", True
        else:
            error, kind, retryable = describe_exit(status), "ProcessDied", True

        def record():
            outcome = self._protocol.finish(
                child.queue, child.task_id, self.listener_id, child.pid, child.token, k.FAILED,
                error, kind, "", retryable, self.retention)
            if outcome == "stale":
                task_logger.info("task %s ended in %.3f s", child.task_id, elapsed)
            else:
                task_logger.warning("task %s %s after %.3f s: %s", child.task_id,
                                    "will be retried" if outcome == "retry" else "failed",
                                    elapsed, error)

        try:
            record()
        except CONNECTION_ERRORS:
            self._backlog.append(record)

    def _flush_backlog(self):
        while self._backlog:
            self._backlog[0]()
            self._backlog.pop(0)

    def _stop_child(self, child, reason, current):
        child.stop_reason = reason
        child.kill_at = current + self.kill_grace
        self._signal_child(child, signal.SIGTERM)

    def _enforce_deadlines(self, current):
        for child in self.children.values():
            if child.deadline and not child.stop_reason and current >= child.deadline:
                task_logger.warning("task %s: timed out after %g s, stopping pid %d",
                                    child.task_id, child.timeout, child.pid)
                self._stop_child(child, "timeout", current)
            elif child.kill_at and current >= child.kill_at:
                task_logger.warning("task %s: pid %d still running %g s after SIGTERM, killing",
                                    child.task_id, child.pid, self.kill_grace)
                child.kill_at = None
                self._signal_child(child, signal.SIGKILL)

    @staticmethod
    def _signal_child(child, signum):
        """Signal the task's process group (its subprocesses too); the child may not have
        called setsid() yet, so fall back to the process alone."""
        try:
            os.killpg(child.pid, signum)
        except (ProcessLookupError, PermissionError):
            try:
                os.kill(child.pid, signum)
            except ProcessLookupError:
                pass

    # -- signals ------------------------------------------------------------------------------

    def _install_signals(self):
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        previous = {
            "wakeup": signal.set_wakeup_fd(self._wake_w, warn_on_full_buffer=False),
            signal.SIGTERM: signal.signal(signal.SIGTERM, self._on_stop_signal),
            signal.SIGINT: signal.signal(signal.SIGINT, self._on_stop_signal),
            signal.SIGCHLD: signal.signal(signal.SIGCHLD, lambda *_: None),
        }
        return previous

    def _restore_signals(self, previous):
        signal.set_wakeup_fd(previous.pop("wakeup"))
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        os.close(self._wake_r)
        os.close(self._wake_w)
        self._wake_r = self._wake_w = None

    def _on_stop_signal(self, signum, frame):
        self._stops += 1
        if self._stops == 1:
            logger.info("listener %s: %s received, finishing %d running task(s); send it "
                        "again to stop at once", self.listener_id, signal.Signals(signum).name,
                        len(self.children))
        else:
            logger.warning("listener %s: stopping at once; running tasks continue in their own "
                           "processes", self.listener_id)

    def _shutdown(self):
        self._close_waiters()
        self._drop_spare()
        try:
            for queue in self.queues:
                released = self._protocol.release_listener(self.listener_id, queue, own=True)
                if released and released[0]:
                    logger.info("listener %s: requeued %d unstarted task(s) of %s",
                                self.listener_id, len(released[0]), queue)
            self._protocol.forget_listener(self.listener_id)
        except CONNECTION_ERRORS as exc:
            self.stopped_cleanly = False
            logger.warning("listener %s: could not unregister (%s); the reaper will release it",
                           self.listener_id, exc)
        logger.info("listener %s stopped%s", self.listener_id,
                    "" if self.stopped_cleanly else " (not cleanly)")

    # -- the task's process -------------------------------------------------------------------

    def _child_main(self, start_pipe):
        """Wait for a task on the pipe, run it, record its end, and exit (never returns)."""
        code, task_id = 0, None
        try:
            os.setsid()
            signal.set_wakeup_fd(-1)
            os.close(self._wake_r)
            os.close(self._wake_w)
            for signum in (signal.SIGINT, signal.SIGCHLD):
                signal.signal(signum, signal.SIG_DFL)
            signal.signal(signal.SIGTERM, _raise_stop)
            keeper = _LeaseKeeper()  # a thread's first start costs most here, not later
            handed = _read_all(start_pipe)
            if handed:
                random.seed()  # not the listener's sequence, nor its other children's
                handed = json.loads(handed)
                task_id = handed["id"]
                code = self._run_task(handed["queue"], Task(task_id, handed["fields"]),
                                      handed["token"], keeper)
        except StopRequested:
            code = 128 + signal.SIGTERM
        except BaseException:
            logger.exception("task %s: its process failed outside the task", task_id)
            code = 1
        finally:
            logging.shutdown()
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)

    def _run_task(self, queue, task, token, keeper):
        protocol = self._protocol
        task_id = task.id
        running = RunningTask(protocol, task, token)
        set_current_task(running)
        keeper.keep(running, os.getppid())
        try:
            value = encode_result(self._callback(task))
            outcome, error_type, trace = k.COMPLETE, "", ""
            if running.cancel_requested.is_set():
                # it saw should_stop() and ended early: what the operator asked for
                outcome, value, error_type = k.FAILED, "cancelled", "Cancelled"
        except StopRequested:
            if running.cancel_requested.is_set():
                outcome, value, error_type, trace = k.FAILED, "cancelled", "Cancelled", ""
            elif running.timed_out.is_set():
                outcome, error_type, trace = k.FAILED, "Timeout", ""
                value = f"timed out after {task.timeout:g} s"
            else:
                raise  # stopped by the listener, which records why
        except BaseException as exc:
            outcome = k.FAILED
            value, error_type, trace = error_fields(exc)
            task_logger.error("task %s failed: %s", task_id, value, exc_info=True)
        retryable = error_type != "Cancelled"
        recorded = _patiently(lambda: protocol.finish(
            queue, task_id, self.listener_id, os.getpid(), token, outcome, value, error_type,
            trace, retryable, self.retention))
        if self._on_task_end:
            self._on_task_end(task, recorded, value, error_type)
        return 0


class _LeaseKeeper(threading.Thread):
    """The thread that will renew the task's lease, started while the process still waits for
    its task: it then only has to be told which task it keeps."""

    def __init__(self):
        super().__init__(name="blueque-lease", daemon=True)
        self._given = threading.Event()
        self._task = None
        self.start()

    def keep(self, running, parent_pid):
        self._task = (running, parent_pid)
        self._given.set()

    def run(self):
        self._given.wait()
        running, parent_pid = self._task
        running.renew_lease_until_finished(parent_pid, own_process=True)


def _write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _read_all(fd):
    """Everything the listener writes to the start pipe (nothing: the task is not to run)."""
    chunks = []
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
    os.close(fd)
    return b"".join(chunks)


def _raise_stop(signum, frame):
    raise StopRequested(f"stopped by signal {signum}")


def _patiently(step):
    """Run a Redis step, retrying with backoff while Redis is unreachable (a task's end must be
    recorded, not lost in a restart)."""
    delay, give_up = 0.2, time.monotonic() + RECORD_PATIENCE
    while True:
        try:
            return step()
        except CONNECTION_ERRORS as exc:
            if time.monotonic() > give_up:
                raise
            task_logger.warning("Redis unreachable (%s); retrying in %.1f s", exc, delay)
            time.sleep(delay)
            delay = min(delay * 2, 10.0)
