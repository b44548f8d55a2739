"""Formatting for the Blueque admin pages: times stored as Unix floats, ages, task links."""

import datetime
import functools
import json
import math
import re
import time
from html import escape
from urllib.parse import quote, urlencode

from django import template
from django.conf import settings
from django.urls import NoReverseMatch, get_script_prefix, get_urlconf
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import mark_safe
from django.utils.translation import gettext, ngettext

from ..core.keys import CANCELLED_TYPES
from ..mount import page_url
from ..rows import state_label, unix_time

register = template.Library()


@functools.lru_cache(maxsize=64)
def _reverse(name, args, prefix, urlconf):
    return page_url(name, args=args)


def _path(name, args=()):
    """reverse(), cached: a page links to dozens of pages, and each reverse() walks the
    resolver. The cache key holds everything the result depends on."""
    return _reverse(name, args, get_script_prefix(), get_urlconf() or settings.ROOT_URLCONF)


@register.simple_tag
def bq_url(name, *args):
    """{% url %} for a Blueque page, on the mount the user is on (see mount.py)."""
    return _path(name, args)


PATH_SAFE = "!$&'()*+,;=~:@"
"""What reverse() leaves unquoted in a path segment (RFC 3986 sub-delimiters, ~ : @)."""


def _times():
    """(time formatter, age formatter) for one page: the time zone and the translated
    formats looked up once, not once per cell."""
    zone = timezone.get_current_timezone()
    now = time.time()
    units = (gettext("%(s).1f s"), gettext("%(s)d s"), gettext("%(m)d min %(s)d s"),
             gettext("%(h)d h %(m)d min"), gettext("%(d)d d %(h)d h"))
    ago, ahead = gettext("%(duration)s ago"), gettext("in %(duration)s")
    invalid = gettext("invalid")

    def duration(seconds):
        seconds = abs(float(seconds))
        if not math.isfinite(seconds):  # a time nobody could have written (inf, nan)
            return "—"
        if seconds < 10:
            return units[0] % {"s": seconds}
        whole = int(seconds)
        if whole < 60:
            return units[1] % {"s": whole}
        if whole < 3600:
            return units[2] % {"m": whole // 60, "s": whole % 60}
        if whole < 86400:
            return units[3] % {"h": whole // 3600, "m": whole % 3600 // 60}
        return units[4] % {"d": whole // 86400, "h": whole % 86400 // 3600}

    def moment(value):
        if value is None or value == "":
            return "—"
        seconds = unix_time(value)
        if seconds is not None:
            try:
                return datetime.datetime.fromtimestamp(seconds, zone).strftime(
                    "%Y-%m-%d %H:%M:%S")
            except (ValueError, OverflowError, OSError):  # year 1 or 9999 in this zone
                pass
        return invalid  # inf, NaN, past the year 9999, not a number

    def age(value):
        seconds = unix_time(value)
        if seconds is None:
            return ""
        delta = now - seconds
        return (ago if delta >= 0 else ahead) % {"duration": duration(delta)}

    return moment, age, duration


@register.filter
def bq_state(state):
    return state_label(state)


@register.filter
def bq_time(value):
    """A Unix time as a date and time of the current time zone ('—' when unknown)."""
    return _times()[0](value)


@register.filter
def bq_duration(seconds):
    """A number of seconds in its two largest units: '42 s', '3 min 5 s', '2 h 10 min'."""
    return "—" if seconds is None else _times()[2](seconds)


@register.filter
def bq_ago(value):
    """How long ago (or in how long) a Unix time is: '3 min 5 s ago', 'in 42 s'."""
    return "" if value is None else _times()[1](value)


@register.filter
def bq_seconds_ago(seconds):
    """An age in seconds as '3 min 5 s ago' ('—' when unknown)."""
    if seconds is None:
        return "—"
    return gettext("%(duration)s ago") % {"duration": _times()[2](seconds)}


@register.filter
def bq_listener_summary(queue):
    """'2 live, 1 stale, 1 blueque 1.0' for a queue's listeners."""
    parts = [ngettext("%(count)d live", "%(count)d live", len(queue.live))
             % {"count": len(queue.live)}]
    if queue.stale:
        parts.append(ngettext("%(count)d stale", "%(count)d stale", len(queue.stale))
                     % {"count": len(queue.stale)})
    if queue.v1:
        parts.append(ngettext("%(count)d blueque 1.0", "%(count)d blueque 1.0", len(queue.v1))
                     % {"count": len(queue.v1)})
    return ", ".join(parts)


@register.filter
def bq_ended(queue):
    """'12 complete, 3 failed' over the last hour."""
    complete, failed = queue.ended_last_hour
    return ", ".join((ngettext("%(count)d complete", "%(count)d complete", complete)
                      % {"count": complete},
                      ngettext("%(count)d failed", "%(count)d failed", failed)
                      % {"count": failed}))


@register.filter
def bq_limits(queue):
    """'2 of 2 running, 1 per key, 30/m' for a queue's limits (this site's settings), '—'
    for none."""
    limits, parts = queue.limits, []
    if limits.get("max_running"):
        parts.append(gettext("%(running)d of %(most)d running")
                     % {"running": queue.counts.get("started", 0),
                        "most": limits["max_running"]})
    if limits.get("max_running_per_key"):
        parts.append(gettext("%(count)d per key") % {"count": limits["max_running_per_key"]})
    if limits.get("rate_limit"):
        parts.append(str(limits["rate_limit"]))
    return ", ".join(parts) or "—"


@register.simple_tag
def bq_live(value, *key):
    """``value`` in a span the page's script refreshes, under the ``data-bq-live`` key made
    of the other arguments (see views/live.py)."""
    return format_html('<span data-bq-live="{}">{}</span>', " ".join(map(str, key)), value)


@register.filter
def bq_live_in(value, key):
    """bq_live as a filter, for a value inside a translated sentence."""
    return bq_live(value, key)


@register.filter
def bq_chart(queue):
    """A queue's "Last hour" chart (charts.py)."""
    from ..charts import queue_chart

    return queue_chart(queue)


@register.filter
def bq_field(value):
    """A field's value as the task page shows it: a number with more than two decimals
    rounded to two ('12.083333333333334': '12.08'), anything else as it is."""
    if isinstance(value, str) and re.fullmatch(r"-?\d+\.\d{3,}", value):
        return f"{float(value):.2f}"
    return value


@register.filter
def bq_json(value):
    """A value as JSON, for a data- attribute (the template escapes it)."""
    return json.dumps(value, separators=(",", ":"))


@register.filter
def bq_join(values):
    """A list as 'a, b, c'."""
    return ", ".join(str(value) for value in values)


@register.filter
def bq_task_url(task_id):
    """The task page's URL; through the find page for an id no path can hold (a '/')."""
    try:
        return page_url("blueque:task", args=[task_id])
    except NoReverseMatch:
        return f"{page_url('blueque:find')}?{urlencode({'id': task_id})}"


def _task_urls():
    """A fast bq_task_url for many rows: reverse() once, then quote each id as it would."""
    prefix = _path("blueque:task", ("0",))[:-2]
    find = _path("blueque:find")

    def url(task_id):
        if not task_id or "/" in task_id:
            return f"{find}?{urlencode({'id': task_id})}"
        return f"{prefix}{quote(task_id, safe=PATH_SAFE)}/"
    return url


@register.simple_tag
def bq_task_rows(tasks, state, selectable):
    """The rows of a list page, made in Python with plain escaping from the raw fields: a
    template tag (or a format_html) per cell would cost more than everything else the page
    does. Django's admin makes its change list's rows in Python too."""
    url = _task_urls()
    moment, age, _duration = _times()
    select, missing = gettext("Select task %(id)s"), gettext("(no task)")
    priority = gettext("priority %(priority)s")
    cancelled = escape(gettext("cancelled"))
    running = state in ("reserved", "started")
    finished = state in ("complete", "failed")
    rows = []
    for task in tasks:
        get = task.fields.get
        task_id = escape(task.id)
        cells = []
        if selectable:
            label = escape(select % {"id": task.id})
            cells.append(f'<td class="action-checkbox"><input type="checkbox" name="ids" '
                         f'value="{task_id}" class="action-select" aria-label="{label}"></td>')
        badge = ""
        if get("priority"):
            badge = (f' <span class="blueque-badge">'
                     f'{escape(priority % {"priority": get("priority")})}</span>')
        cells.append(f'<th scope="row"><a href="{escape(url(task.id))}"><code>{task_id}</code>'
                     f"</a>{badge}</th>")
        if running:
            cells.append(f"<td>{escape(state_label(get('status')) or missing)}</td>")
        updated = get("updated")
        cells.append(f"<td>{escape(moment(get('created')))}</td>"
                     f'<td title="{escape(age(updated)) if updated else ""}">'
                     f"{escape(moment(updated))}</td>")
        if state == "scheduled":  # a score that is no number (inf) reads as None: its eta
            due = task.score if task.score is not None else get("eta")
            cells.append(f'<td title="{escape(age(due))}">{escape(moment(due))}</td>')
        if running or finished:
            cells.append(f'<td>{escape(get("node") or "—")}</td>'
                         f'<td class="num">{escape(get("pid") or "—")}</td>')
        if running:
            bar, progress = "", task.progress
            if progress is not None:
                percent = bq_percent(progress)
                bar = f'<progress max="100" value="{progress:.1f}">{percent}</progress> {percent}'
            message = escape(get("progress_message") or "")
            cells.append(f'<td>{bar} <span class="quiet blueque-preview" title="{message}">'
                         f"{message}</span></td>")
        attempts, retries = escape(get("attempts") or "0"), task.retries
        if retries:
            attempts += f"/{retries + 1}"
        parameters = escape(get("parameters") or "")
        cells.append(f'<td class="num">{attempts}</td><td><code class="blueque-preview" '
                     f'title="{parameters}">{parameters}</code></td>')
        if state == "failed" and get("error_type") in CANCELLED_TYPES:
            cells.append(f'<td><span class="blueque-badge blueque-cancelled">{cancelled}</span>'
                         f"</td>")
        elif state == "failed":
            error = get("error") or ""
            if get("error_type"):
                error = f"{get('error_type')}: {error}"
            cells.append(f'<td><span class="blueque-error">{escape(error)}</span></td>')
        rows.append(f"<tr>{''.join(cells)}</tr>")
    return mark_safe("\n".join(rows))  # every value in it was escaped above


@register.simple_tag
def bq_queue_url(queue, state=None, page=None):
    """A queue page's URL (the name goes in the query string: any name fits there)."""
    query = {"name": queue}
    if state:
        query["state"] = state
    if page:
        query["p"] = page
    return f"{_path('blueque:dashboard')}?{urlencode(query)}"


@register.simple_tag
def bq_bulk_url(job):
    """A bulk job's progress page."""
    query = {"action": job.action, "state": job.state, "queue": job.queue}
    return f"{_path('blueque:bulk_job')}?{urlencode(query)}"


@register.filter
def bq_percent(value):
    if value is None:
        return ""
    return f"{float(value):.0f}%"
