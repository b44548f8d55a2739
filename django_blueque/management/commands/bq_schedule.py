from django.core.management.base import CommandError

from django_blueque.conf import get_settings
from django_blueque.worker import run_loop, schedule_once

from ._base import BluequeCommand, StopFlag


class Command(BluequeCommand):
    help = ("Move due scheduled tasks (ETAs and retry backoffs) of every queue to their queues, "
            "and enqueue due periodic tasks, every --interval seconds. Any number of instances "
            "may run at once: no task is moved twice and each periodic run happens once.")

    def add_arguments(self, parser):
        super().add_arguments(parser)
        parser.add_argument("--once", action="store_true", help="One pass, then exit.")
        parser.add_argument("--interval", type=float, default=None,
                            help="Seconds between passes (default BLUEQUE['SCHEDULER_INTERVAL'],"
                                 " 1).")

    def handle(self, **options):
        self.setup_logging(options["log_level"])
        interval = options["interval"] or get_settings().scheduler_interval
        if interval <= 0:
            raise CommandError("--interval must be positive")
        if options["once"]:
            moved = schedule_once()
            self.stdout.write(f"moved {sum(map(len, moved.values()))} due task(s)")
            return
        self.ping()
        run_loop(schedule_once, interval, StopFlag())
