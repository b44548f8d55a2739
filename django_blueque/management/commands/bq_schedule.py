from django_blueque.services import schedule_once

from ._base import LoopCommand


class Command(LoopCommand):
    help = ("Move due scheduled tasks (ETAs and retry backoffs) of every queue to their queues, "
            "and enqueue due periodic tasks, every --interval seconds. Any number of instances "
            "may run at once: no task is moved twice and each periodic run happens once.")
    interval_setting = "scheduler_interval"

    def handle(self, **options):
        self.setup_logging(options)
        interval = self.interval(options)
        if options["once"]:
            self.ping()
            moved = schedule_once()
            self.stdout.write(f"moved {sum(map(len, moved.values()))} due task(s)")
            return
        self.loop(schedule_once, interval)
