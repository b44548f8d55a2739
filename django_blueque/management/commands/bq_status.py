from django_blueque.conf import get_client
from django_blueque.queries import STATES, Reader

from ._base import BluequeCommand


def table(headers, rows):
    """Rows as aligned columns, the way `ps` prints them."""
    rows = [[("" if cell is None else str(cell)) for cell in row] for row in rows]
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


class Command(BluequeCommand):
    help = ("Print every queue with its tasks per state and the age of its oldest pending task, "
            "every listener with its heartbeat age, and the running tasks with their progress.")

    def handle(self, **options):
        reader = Reader(get_client())
        overview = reader.overview()
        self.stdout.write(table(
            ["QUEUE", *[state.upper() for state in STATES], "OLDEST PENDING", "TASK"],
            [[queue.name, *[queue.counts[state] for state in STATES],
              age(queue.oldest_pending_age), queue.task or "(none registered)"]
             for queue in overview.queues]))
        listeners = reader.listeners()
        self.stdout.write("")
        self.stdout.write(table(
            ["LISTENER", "QUEUE", "STATE", "HEARTBEAT", "RUNNING", "RESERVED"],
            [[listener.id, listener.queue, listener.kind, age(listener.heartbeat_age),
              len(listener.running), len(listener.reserved)] for listener in listeners]))
        running = [(listener, task) for listener in listeners for task in listener.running]
        self.stdout.write("")
        self.stdout.write(table(
            ["TASK", "QUEUE", "LISTENER", "RUNNING FOR", "PROGRESS"],
            [[task.id, listener.queue, listener.id,
              age(reader.now - task.started if task.started else None),
              "-" if task.progress is None else
              f"{task.progress:.0f}% {task.progress_message or ''}".strip()]
             for listener, task in running]))
