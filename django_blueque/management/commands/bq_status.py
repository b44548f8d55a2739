import json
import time

import redis
from django.core.management.base import CommandError

from django_blueque.conf import get_client, redis_in_use
from django_blueque.core.values import finite_number
from django_blueque.queries import QUEUES_PER_PAGE, Reader
from django_blueque.rows import STATES

from ._base import BluequeCommand

RUNNING_SHOWN = 100
"""Most running tasks listed per queue (the longest running first)."""


def printable(text):
    """``text`` with control characters escaped (``\\x1b``): a queue name or task id written
    by someone else must not move the cursor, clear the screen or retitle the terminal."""
    return "".join(char if char.isprintable() else repr(char)[1:-1] for char in text)


def table(headers, rows):
    """Rows as aligned columns, the way `ps` prints them."""
    rows = [[("" if cell is None else printable(str(cell))) for cell in row] for row in rows]
    widths = [max(len(str(h)), *(len(row[i]) for row in rows)) if rows else len(str(h))
              for i, h in enumerate(headers)]
    lines = ["  ".join(str(h).ljust(w) for h, w in zip(headers, widths, strict=True))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows]
    return "\n".join(line.rstrip() for line in lines)


def age(seconds):
    if seconds is None:
        return "-"
    seconds = int(seconds)
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def positive(kind):
    def parse(text):
        value = kind(text)
        if value <= 0:
            raise ValueError(text)
        return value
    parse.__name__ = kind.__name__
    return parse


class Command(BluequeCommand):
    help = ("Print the queues (one page of them) with their tasks per state and the age of their "
            "oldest pending task, the listeners with their heartbeat age, and the running tasks "
            "with their progress: the dashboard's data.")

    def add_arguments(self, parser):
        super().add_arguments(parser)
        parser.add_argument("--limit", type=positive(int), default=QUEUES_PER_PAGE,
                            help=f"Queues per page (default {QUEUES_PER_PAGE}; those with the "
                                 f"most listeners first).")
        parser.add_argument("--page", type=positive(int), default=1, help="Page of queues.")
        parser.add_argument("--search", default="", help="Only the queues whose name holds this.")
        parser.add_argument("--json", action="store_true",
                            help="One JSON document (the figures of metrics.json, and the "
                                 "running tasks).")
        parser.add_argument("--watch", type=positive(float), metavar="SECONDS",
                            help="Print again every SECONDS seconds, until interrupted.")

    def handle(self, **options):
        if options["watch"] is None:
            self.report(options)
            return
        try:
            while True:
                if self.stdout.isatty():
                    self.stdout.write("\x1b[H\x1b[2J", ending="")
                self.stdout.write(f"Every {options['watch']:g}s: "
                                  f"{time.strftime('%Y-%m-%d %H:%M:%S')}\n")
                try:
                    self.report(options)
                except (redis.ConnectionError, redis.TimeoutError) as exc:
                    # a monitor outlives a Redis restart: say so, and look again
                    self.stdout.write(f"Redis does not answer: {exc}")
                self.stdout.flush()
                time.sleep(options["watch"])
        except KeyboardInterrupt:
            pass

    def report(self, options):
        reader = Reader(get_client())
        overview = reader.overview(options["page"], options["search"], options["limit"])
        if options["page"] > overview.pages:
            raise CommandError(f"--page {options['page']}: there are {overview.pages} pages")
        listeners = reader.listeners()
        live = {listener.id for listener in listeners if listener.kind == "live"}
        running = self.running(reader, overview)
        for key, why in reader.unreadable.items():
            self.stderr.write(printable(f"warning: {key} could not be read ({why}); "
                                        f"counted as empty"))
        if options["json"]:
            data = overview.as_dict()
            data["running"] = [{
                "id": task.id, "queue": queue, "listener": task.node,
                "listener_live": task.node in live,
                "started": finite_number(task.fields.get("started")),
                "progress": finite_number(task.fields.get("progress")),
                "message": task.progress_message} for queue, task in running]
            self.stdout.write(json.dumps(data, allow_nan=False, default=str))
            return
        self.stdout.write(f"Redis: {redis_in_use()}")
        self.stdout.write(table(
            ["QUEUE", *[state.upper() for state in STATES], "OLDEST PENDING", "TASK"],
            [[queue.name, *[queue.counts[state] for state in STATES],
              age(queue.oldest_pending_age), queue.task or "(none registered)"]
             for queue in overview.queues]))
        for queue in overview.unserved:
            self.stdout.write(printable(f"warning: {queue.name} has {queue.counts['pending']} "
                                        f"pending task(s) and no live listener: {fix(queue)}"))
        if overview.pages > 1:
            self.stdout.write(f"(page {overview.page} of {overview.pages}: {overview.total} "
                              f"queues; --page N for another)")
        self.stdout.write("")
        self.stdout.write(table(
            ["LISTENER", "QUEUE", "STATE", "HEARTBEAT", "RUNNING", "RESERVED"],
            [[listener.id, listener.queue, "stopping" if listener.stopping else listener.kind,
              age(listener.heartbeat_age),
              len(listener.running), len(listener.reserved)] for listener in listeners]))
        self.stdout.write("")
        self.stdout.write(table(
            ["TASK", "QUEUE", "LISTENER", "RUNNING FOR", "PROGRESS"],
            [running_row(reader.now, queue, task, live) for queue, task in running]))

    def running(self, reader, overview):
        """[(queue, task)]: the running tasks of the page's queues, from their started sets,
        so that a task whose listener is gone (stopped at once, or dead and released by the
        reaper) and that runs on in its own process is listed too."""
        running = []
        for queue in overview.queues:
            if queue.counts["started"]:
                page = reader.queue_page(queue.name, "started", 1, RUNNING_SHOWN)
                running += [(queue.name, task) for task in (page["tasks"] if page else [])]
        return running


def fix(queue):
    if queue.task:
        return "start manage.py bq_listen"
    return ("no task is registered for it here: define it in an installed app's tasks.py "
            "(other modules are not imported), then start manage.py bq_listen")


def running_row(now, queue, task, live):
    started = finite_number(task.fields.get("started"))
    progress = finite_number(task.fields.get("progress"))
    node = task.node or "-"
    return [task.id, queue, node if task.node in live else f"{node} (gone)",
            age(now - started if started else None),
            "-" if progress is None else f"{progress:.0f}% {task.progress_message or ''}".strip()]
