"""What the bq_* commands share: logging set from --log-level, and one clear line (not a
traceback) when Redis does not answer or the setting is wrong."""

import logging
import os
import signal
import sys

import redis
from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError

from django_blueque.conf import get_client, get_settings, redis_in_use, using_default_redis
from django_blueque.logs import FORMATTERS
from django_blueque.services import run_loop

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


class BluequeCommand(BaseCommand):
    requires_system_checks = ["compatibility"]

    def add_arguments(self, parser):
        parser.add_argument("--log-level", default="INFO", choices=LOG_LEVELS, type=str.upper,
                            help="Level of the django_blueque loggers on stderr (default INFO).")
        parser.add_argument("--log-format", default="text", choices=sorted(FORMATTERS),
                            help="Lines on stderr: text (default) or json, one JSON object per "
                                 "line; both name the task a record comes from. Used when the "
                                 "project's LOGGING does not handle these records.")

    def execute(self, *args, **options):
        try:
            done = super().execute(*args, **options)
            self.stdout.flush()  # here, where a reader gone away is caught below
            return done
        except BrokenPipeError:
            # the reader of the output left (``bq_status | head``): stop as ``ls | head`` does,
            # with no traceback, and nothing more written to the closed pipe at exit
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            sys.exit(1)
        except ImproperlyConfigured as exc:
            raise CommandError(f"BLUEQUE setting: {exc}") from None
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            raise CommandError(f"Redis does not answer: {exc}") from None

    def setup_logging(self, options):
        """Unless the project's LOGGING handles them, send log records to stderr in the
        --log-format: django_blueque's from --log-level, the others (a task's own) from the
        root logger's level."""
        log = logging.getLogger("django_blueque")
        log.setLevel(options["log_level"])
        root = logging.getLogger()
        if log.handlers or root.handlers:
            if options["log_format"] != "text":
                self.stderr.write(f"--log-format {options['log_format']} is not used: the "
                                  "project's LOGGING handles log records (its formatters "
                                  "apply; see django_blueque.logs.JSONFormatter).")
            return
        handler = logging.StreamHandler(self.stderr._out)
        handler.setFormatter(FORMATTERS[options["log_format"]]())
        root.addHandler(handler)

    def ping(self):
        """The first log line names the Redis this process uses (a warning when it is the
        default one, often a server other programs share); then one PING."""
        command = type(self).__module__.rpartition(".")[2]
        logging.getLogger("django_blueque.commands").log(
            logging.WARNING if using_default_redis() else logging.INFO, "%s uses Redis %s",
            command, redis_in_use())
        get_client().redis.ping()


class LoopCommand(BluequeCommand):
    """A command that repeats one pass every --interval seconds, or makes one with --once."""

    # the attribute of conf.Settings giving the default interval
    interval_setting: str | None = None
    duty = "scheduler"  # its name in its log lines (services.run_loop)

    def add_arguments(self, parser):
        super().add_arguments(parser)
        parser.add_argument("--once", action="store_true", help="One pass, then exit.")
        parser.add_argument("--interval", type=float, default=None,
                            help=f"Seconds between passes (default BLUEQUE"
                                 f"['{self.interval_setting.upper()}']).")

    def interval(self, options):
        if options["interval"] is None:
            return getattr(get_settings(), self.interval_setting)
        if options["interval"] <= 0:
            raise CommandError("--interval must be positive")
        return options["interval"]

    def loop(self, step, interval):
        self.ping()
        run_loop(step, interval, StopFlag(), self.duty)


class StopFlag:
    """SIGTERM/SIGINT set it; loops check it between steps."""

    def __init__(self):
        self.stopped = False
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, self._stop)

    def _stop(self, signum, frame):
        self.stopped = True

    def __call__(self):
        return self.stopped
