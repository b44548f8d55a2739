from django.core.management.base import CommandError

from django_blueque.conf import get_settings
from django_blueque.worker import reap_once, run_loop

from ._base import BluequeCommand, StopFlag


class Command(BluequeCommand):
    help = ("Recover the tasks of dead listeners (requeue what they had not started; retry or "
            "fail what died with them) and delete finished tasks past their retention, from any "
            "node. Prints one line per action: queue, task or listener, what, why.")

    def add_arguments(self, parser):
        super().add_arguments(parser)
        parser.add_argument("--once", action="store_true", help="One pass, then exit.")
        parser.add_argument("--dry-run", action="store_true",
                            help="Print what would be done and change nothing (implies --once).")
        parser.add_argument("--interval", type=float, default=None,
                            help="Seconds between passes (default BLUEQUE['REAPER_INTERVAL'], 5).")

    def handle(self, **options):
        self.setup_logging(options["log_level"])
        interval = options["interval"] or get_settings().reaper_interval
        if interval <= 0:
            raise CommandError("--interval must be positive")
        if options["once"] or options["dry_run"]:
            self.report(reap_once(dry_run=options["dry_run"]))
            return
        self.ping()
        run_loop(lambda: self.report(reap_once()), interval, StopFlag())

    def report(self, actions):
        for action in actions:
            self.stdout.write(str(action))
        self.stdout.flush()
