from django_blueque.services import ReaperLoop, reap_once

from ._base import LoopCommand


class Command(LoopCommand):
    help = ("Recover the tasks of dead listeners (requeue what they had not started; retry or "
            "fail what died with them), settle the dependents an end left waiting, and delete "
            "finished tasks past their retention, from any node. Prints one line per action: "
            "queue, task or listener, what, why.")
    interval_setting = "reaper_interval"
    duty = "reaper"

    def add_arguments(self, parser):
        super().add_arguments(parser)
        parser.add_argument("--dry-run", action="store_true",
                            help="Print what would be done and change nothing (implies --once).")

    def handle(self, **options):
        self.setup_logging(options)
        interval = self.interval(options)
        if options["once"] or options["dry_run"]:
            self.ping()
            self.report(reap_once(dry_run=options["dry_run"]))  # waits until decided
            return
        self.loop(ReaperLoop(self.report), interval)

    def report(self, actions):
        for action in actions:
            self.stdout.write(str(action))
        self.stdout.flush()
