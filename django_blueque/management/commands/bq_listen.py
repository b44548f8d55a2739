import os
import signal
import subprocess
import sys
import time

from django.conf import settings
from django.core.management.base import CommandError
from django.utils import autoreload

from django_blueque.registry import registered_tasks
from django_blueque.worker import build_listener

from ._base import BluequeCommand, StopFlag


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
        self.setup_logging(options["log_level"])
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
            restart.append(signum)
            runner.stop()

        signal.signal(signal.SIGHUP, on_hangup)
        clean = runner.run()
        if restart and clean:
            os.execv(sys.executable, [sys.executable, *sys.argv])
        if not clean:
            sys.exit(1)

    def run_with_reload(self):
        """Run the listener in a child process and restart it (gracefully: SIGTERM, so running
        tasks finish) whenever a Python file of the project changes. The listener itself must
        own its process's main thread (signals, select), so Django's in-process reloader,
        which runs the command in a thread, cannot be used."""
        argv = [sys.executable, *sys.argv, "--noreload"]
        reloader = autoreload.StatReloader()
        stop = StopFlag()
        while True:
            child = subprocess.Popen(argv)
            files = dict(reloader.snapshot_files())
            while child.poll() is None:
                time.sleep(1)
                if stop():
                    child.send_signal(signal.SIGTERM)
                    return child.wait()
                if dict(reloader.snapshot_files()) != files:
                    self.stderr.write("Code changed: restarting the listener.")
                    child.send_signal(signal.SIGTERM)
                    child.wait()
                    break
            else:
                return child.returncode
