"""The dashboard's "Last hour" chart of a queue, drawn on the server as SVG: complete and
failed tasks per minute stacked, with a count axis, a time axis in the current time zone, and
each minute's figures on hover (an SVG <title>). No script and no library: the page's live
updates swap the whole SVG (views/live.py)."""

import datetime

from django.utils import timezone
from django.utils.html import escape, format_html
from django.utils.safestring import SafeString, mark_safe
from django.utils.translation import gettext

from .rows import QueueStats

WIDTH, HEIGHT = 360, 130
LEFT, RIGHT, TOP, BOTTOM = 30, 8, 10, 22  # margins: the count labels, the time labels
PLOT_WIDTH, PLOT_HEIGHT = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
TIME_TICKS = (0, 15, 30, 45, 59)  # minutes of the series labelled on the time axis


def nice_ceiling(value: int) -> int:
    """The smallest 1, 2 or 5 times a power of ten that is >= value (at least 2), so that the
    axis's top and middle are whole counts."""
    step = 1
    while True:
        for factor in (1, 2, 5):
            if factor * step >= max(value, 2):
                return factor * step
        step *= 10


def _clock(unix_time: float) -> str:
    moment = datetime.datetime.fromtimestamp(unix_time, datetime.UTC)
    return timezone.localtime(moment).strftime("%H:%M")


def queue_chart(queue: QueueStats) -> SafeString:
    """A queue's chart of its last hour (QueueStats.throughput)."""
    return throughput_chart(queue.throughput, gettext(
        "Tasks of queue %(queue)s ended per minute over the last hour: complete, failed")
        % {"queue": queue.name})


def throughput_chart(series: list[list[int]], label: str) -> SafeString:
    """``series``: [minute's Unix time, complete, failed] per minute, oldest first (60 of
    them, rows.throughput); ``label``: the chart's accessible name."""
    top = nice_ceiling(max((complete + failed for _at, complete, failed in series), default=0))
    column = PLOT_WIDTH / max(len(series), 1)
    scale = PLOT_HEIGHT / top
    hover = gettext("%(time)s: %(complete)s complete, %(failed)s failed")
    parts = []
    for count in (0, top // 2, top):  # the count axis: grid lines and their labels
        y = TOP + PLOT_HEIGHT - count * scale
        parts.append(f'<line class="blueque-grid" x1="{LEFT}" x2="{WIDTH - RIGHT}" '
                     f'y1="{y:.1f}" y2="{y:.1f}"/><text class="blueque-chart-label" '
                     f'x="{LEFT - 4}" y="{y + 3.5:.1f}" text-anchor="end">{count}</text>')
    for index, (at, complete, failed) in enumerate(series):
        x = LEFT + index * column
        bars, base = [], float(TOP + PLOT_HEIGHT)
        for count, kind in ((complete, "complete"), (failed, "failed")):
            if count:
                size = count * scale
                base -= size
                bars.append(f'<rect class="blueque-bar-{kind}" x="{x + 0.4:.2f}" '
                            f'y="{base:.2f}" width="{column - 0.8:.2f}" height="{size:.2f}"/>')
        title = escape(hover % {"time": _clock(at), "complete": complete, "failed": failed})
        parts.append(f'<g><title>{title}</title>{"".join(bars)}<rect class="blueque-bar-hit" '
                     f'x="{x:.2f}" y="{TOP}" width="{column:.2f}" height="{PLOT_HEIGHT}"/></g>')
    for index in TIME_TICKS:  # the time axis
        if index < len(series):
            x = LEFT + (index + 0.5) * column
            anchor = "start" if index == 0 else "end" if index == TIME_TICKS[-1] else "middle"
            parts.append(f'<text class="blueque-chart-label" x="{x:.1f}" y="{HEIGHT - 6}" '
                         f'text-anchor="{anchor}">{_clock(series[index][0])}</text>')
    return format_html('<svg class="blueque-chart" viewBox="0 0 {} {}" width="{}" height="{}" '
                       'role="img" aria-label="{}">{}</svg>', WIDTH, HEIGHT, WIDTH, HEIGHT,
                       label, mark_safe("".join(parts)))  # every value above is a number
