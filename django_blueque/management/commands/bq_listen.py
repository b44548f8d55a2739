import ctypes
import functools
import logging
import os
import signal
import subprocess
import sys
import time

from django.conf import settings
from django.core.management.base import CommandError
from django.utils import autoreload

from django_blueque.registry import registered_tasks
from django_blueque.services import build_listener

from ._base import BluequeCommand

logger = logging.getLogger("django_blueque.listener")  # in --log-format, as the listener's


class Command(BluequeCommand):
    help = ("Listen on queues and run each task in its own forked process with its registered "
            "function. SIGTERM/SIGINT: finish running tasks, take no new one, then exit 0; a "
            "second SIGTERM: exit at once (running tasks finish in their own processes), exit 1. "
            "SIGHUP: the same graceful stop, then restart with fresh code.")

    def add_arguments(self, parser):
        super().add_arguments(parser)
        parser.add_argument("queues", nargs="*", metavar="QUEUE",
                            help="Queues to listen on (default: every registered queue).")
        parser.add_argument("--concurrency", "-c", type=int, default=None,
                            help="Tasks run at once (default BLUEQUE['CONCURRENCY'], 1).")
        parser.add_argument("--burst", action="store_true",
                            help="Exit 0 once the queues are empty and no task runs.")
        parser.add_argument("--max-tasks", type=int, default=None,
                            help="Exit after taking this many tasks (and finishing them).")
        parser.add_argument("--with-scheduler", action="store_true",
                            help="Also move due scheduled and periodic tasks, and run the "
                                 "reaper, in this process (one command for one machine).")
        parser.add_argument("--reload", dest="reload", action="store_true", default=None,
                            help="Restart when code changes (default on when DEBUG is true).")
        parser.add_argument("--noreload", dest="reload", action="store_false",
                            help="Do not restart on code changes.")

    def handle(self, **options):
        self.setup_logging(options)
        tasks = registered_tasks()
        if not tasks:
            raise CommandError("no @blueque_task is registered: define tasks in an installed "
                               "app's tasks.py")
        queues = options["queues"] or sorted(tasks)
        unknown = [queue for queue in queues if queue not in tasks]
        if unknown:
            raise CommandError(f"no task registered for queue(s) {', '.join(unknown)}; "
                               f"registered: {', '.join(sorted(tasks))}")
        if options["concurrency"] is not None and options["concurrency"] < 1:
            raise CommandError("--concurrency must be at least 1")
        if options["max_tasks"] is not None and options["max_tasks"] < 1:
            raise CommandError("--max-tasks must be at least 1")
        self.ping()
        reload = settings.DEBUG if options["reload"] is None else options["reload"]
        if reload and not options["burst"]:
            sys.exit(self.run_with_reload())
        self.listen(queues, options)

    def listen(self, queues, options):
        runner = build_listener(queues, options["concurrency"], options["burst"],
                                options["max_tasks"], duties=options["with_scheduler"])
        restart = []

        def on_hangup(signum, frame):
            if not restart:  # a second SIGHUP changes nothing: the restart is under way
                restart.append(signum)
                logger.info("SIGHUP received: restarting with fresh code once the running "
                            "tasks end, taking no new task meanwhile (a SIGTERM now stops it "
                            "at once)")
                runner.stop()

        signal.signal(signal.SIGHUP, on_hangup)
        clean = runner.run()
        if restart and clean:
            os.execv(sys.executable, [sys.executable, *sys.argv])
        if not clean:
            sys.exit(1)

    def run_with_reload(self):
        """Run the listener in a child process and restart it whenever a Python file of the
        project changes: gracefully (SIGTERM: running tasks end first, however long they
        take), or at once on SIGHUP (SIGTERM again: running tasks finish in their own
        processes). The listener itself must own its process's main thread (signals,
        select), so Django's in-process reloader, which runs the command in a thread, cannot
        be used. The child has its own process group: a Ctrl-C reaches it only through
        here, once (the first stop is graceful, a second one is at once); and it dies with
        this parent (SIGTERM from the kernel), even when the parent is SIGKILLed."""
        argv = [sys.executable, *sys.argv, "--noreload"]
        reloader = autoreload.StatReloader()
        signals = SignalCounter(signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
        now = f"kill -HUP {os.getpid()}"
        logger.info(
            "Autoreload is on (the default when DEBUG; --noreload turns it off). On a code "
            "change the listener takes no new task and restarts once its running tasks end, "
            "which takes as long as they do. To restart at once (running tasks finish in "
            f"their own processes): {now}")
        die_with_this_process = functools.partial(_die_with_parent, os.getpid())
        while True:
            child = subprocess.Popen(argv, process_group=0, preexec_fn=die_with_this_process)
            files = dict(reloader.snapshot_files())
            forwarded, restart = 0, None  # restart: None, "graceful" or "now"
            while child.poll() is None:
                time.sleep(1)
                stops = signals.count(signal.SIGTERM) + signals.count(signal.SIGINT)
                if stops > forwarded:
                    forwarded = stops
                    child.send_signal(signal.SIGTERM)
                if forwarded:
                    continue
                if signals.take(signal.SIGHUP) and restart != "now":
                    logger.info("SIGHUP: restarting the listener now.")
                    restart = "now"
                if restart == "now":  # until it goes: a SIGTERM after the first is at once
                    child.send_signal(signal.SIGTERM)
                elif restart is None:
                    changed = changed_file(files, dict(reloader.snapshot_files()))
                    if changed:
                        logger.info(
                            f"{changed} changed: the listener restarts once its running tasks "
                            f"end (it takes no new task meanwhile). To restart now: {now}")
                        restart = "graceful"
                        child.send_signal(signal.SIGTERM)
            if forwarded or restart is None:
                return child.returncode
            logger.info("Restarting the listener.")


def changed_file(before, after):
    """The first watched file added, removed or modified between two snapshots, or None."""
    for path in sorted(set(before) | set(after)):
        if before.get(path) != after.get(path):
            return path
    return None


class SignalCounter:
    """Counts the signals received, for a loop that checks them between its steps."""

    def __init__(self, *signums):
        self.counts = dict.fromkeys(signums, 0)
        for signum in signums:
            signal.signal(signum, self._received)

    def _received(self, signum, frame):
        self.counts[signum] += 1

    def count(self, signum):
        return self.counts[signum]

    def take(self, signum):
        """Whether ``signum`` came since the last take."""
        taken, self.counts[signum] = self.counts[signum], 0
        return taken > 0


def _die_with_parent(parent):
    """In the reloader's child, before exec: the kernel sends it SIGTERM (a graceful stop) when
    the reloader dies, however it dies, so a listener never outlives its supervisor."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass  # not Linux: the child outlives a SIGKILLed reloader
    if os.getppid() != parent:  # the parent died before prctl took effect
        os.kill(os.getpid(), signal.SIGTERM)


PR_SET_PDEATHSIG = 1
