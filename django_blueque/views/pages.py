"""The read-only pages: the dashboard, a queue's tasks of one state, a task, the listeners."""

import json
from urllib.parse import urlencode

from django.contrib import messages
from django.http import Http404, JsonResponse
from django.shortcuts import redirect, render
from django.urls import NoReverseMatch
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, ngettext
from django.views.decorators.http import require_GET

from .. import actions
from ..conf import get_client
from ..core import keys as k
from ..core.bulk import BULK_ACTIONS
from ..core.limits import size_text
from ..core.values import finite_number, parse_errors
from ..mount import page_url
from ..queries import MAX_NAME, TEXT_BYTES, TEXT_FIELDS, Reader
from ..rows import STATES, group_listeners, pretty, unix_time
from ..templatetags.blueque_admin import bq_queue_url
from . import live
from .common import (
    admin_context,
    next_url,
    staff_view,
    whole_number,
)

PER_PAGE = 100
PER_PAGE_CHOICES = (25, 50, 100, 200, 500)
LIVE_STATUSES = (k.SCHEDULED, k.PENDING, k.RESERVED, k.STARTED)
TIME_FIELDS = {
    "created": gettext_lazy("created"), "eta": gettext_lazy("due (eta)"),
    "started": gettext_lazy("started (last run)"), "updated": gettext_lazy("last update"),
    "finished": gettext_lazy("finished"), "expires": gettext_lazy("deleted after (retention)"),
    "cancel_requested": gettext_lazy("cancellation asked"),
    "checkpoint_at": gettext_lazy("last checkpoint"),
    "held_since": gettext_lazy("held: its concurrency key was full"),
}
FIELD_ORDER = k.PROTOCOL_FIELDS + k.EXTENSION_FIELDS
CANCELLED_FILTERS = {"": gettext_lazy("all"), "only": gettext_lazy("cancelled"),
                     "no": gettext_lazy("not cancelled")}


@require_GET
@staff_view()
def dashboard(request):
    if "name" in request.GET:  # a queue's page: the dashboard's URL, ?name=<queue>
        return queue(request)
    """One page of queues (QUEUES_PER_PAGE), or the queues a search finds."""
    page = whole_number(request.GET.get("p"), 1)
    search = request.GET.get("q", "").strip()[:MAX_NAME]
    if page is None:
        raise Http404(_("No such page."))
    overview = Reader(get_client()).overview(page, search)
    if request.GET.get("live"):
        return live.dashboard(overview)
    links = {label: f"?{urlencode({'p': number})}" for label, number in (
        ("first", 1), ("previous", overview.page - 1), ("next", overview.page + 1),
        ("last", overview.pages)) if 1 <= number <= overview.pages and number != overview.page}
    return render(request, "django_blueque/dashboard.html", admin_context(
        request, _("Blueque"), overview=overview, states=STATES, page_links=links,
        unreadable=overview.unreadable, live_version=live.dashboard_version(overview)))


# the tab a link without a state opens: the first of these that holds tasks (pending if none)
TAB_ORDER = (k.PENDING, k.STARTED, k.RESERVED, k.SCHEDULED, k.FAILED, k.COMPLETE)


@require_GET
@staff_view()
def queue(request):
    name = request.GET.get("name", "")
    state = request.GET.get("state", k.PENDING)
    page = whole_number(request.GET.get("p"), 1)
    per_page = whole_number(request.GET.get("per_page"), PER_PAGE)
    cancelled = request.GET.get("cancelled", "")
    error_type = request.GET.get("error_type")  # the failed list of one error type
    if not k.valid_name(name, longest=MAX_NAME) or state not in STATES or page is None or (
            per_page not in PER_PAGE_CHOICES) or cancelled not in CANCELLED_FILTERS or (
            (cancelled or error_type is not None) and state != k.FAILED) or (
            len(error_type or "") > MAX_NAME):
        raise Http404(_("No such queue or page."))
    reader = Reader(get_client())
    data = reader.queue_page(name, state, page, per_page, error_type)
    if data is None:
        raise Http404(_("No such queue."))
    if "state" not in request.GET and not data["counts"][k.PENDING]:
        busy = next((tab for tab in TAB_ORDER if data["counts"][tab]), k.PENDING)
        if busy != k.PENDING:  # open the tab that has tasks
            return redirect(bq_queue_url(name, busy))
    flags = [actions.is_cancelled(task.fields.get("error_type")) for task in data["tasks"]]
    data["cancelled_here"] = sum(flags)
    if cancelled:  # within the page read: a filter in Redis would read the whole list
        data["tasks"] = [task for task, flag in zip(data["tasks"], flags, strict=True)
                         if flag == (cancelled == "only")]
    if request.GET.get("live"):
        return live.queue(data)
    user = request.user
    task_actions = [action for action in actions.TASK_ACTIONS.values()
                    if state in action.statuses and user.has_perm(action.permission)]
    bulk = [action for action, bulk_state in BULK_ACTIONS
            if bulk_state == state and user.has_perm(actions.bulk_permission(action))]
    pages = data["pages"]
    links = {"first": 1, "previous": data["page"] - 1, "next": data["page"] + 1, "last": pages}
    extra = (f"&per_page={per_page}" if per_page != PER_PAGE else "") + (
        f"&cancelled={cancelled}" if cancelled else "") + (
        f"&{urlencode({'error_type': error_type})}" if error_type is not None else "")
    links = {label: bq_queue_url(name, state, number) + extra
        for label, number in links.items() if 1 <= number <= pages and number != data["page"]}
    return render(request, "django_blueque/queue.html", admin_context(
        request, _("Queue %(queue)s: %(state)s") % {"queue": name, "state": state},
        queue=name, state=state, tabs=[(tab, data["counts"][tab]) for tab in STATES],
        task_actions=task_actions, bulk_actions=bulk, cancelled=cancelled,
        cancelled_filters=CANCELLED_FILTERS, error_type=error_type,
        page_links=links, per_page_choices=PER_PAGE_CHOICES,
        live_version=live.queue_version(data), **data))



def error_events(task):
    """The timeline's entries of a task's failed runs (its error history; the admin reads it
    from the text it was given, which a history cut at TEXT_BYTES does not parse: no entry)."""
    events = []
    for number, error in enumerate(parse_errors(task.fields), 1):
        time = unix_time(error["time"])
        if time is None:
            continue
        label = _("run %(attempt)s failed: %(type)s: %(message)s") % {
            "attempt": error["attempt"] or number, "type": error["type"] or "?",
            "message": str(error["message"] or "")[:200]}
        if error["code"]:
            label += " " + _("(code %(code)s)") % {"code": error["code"]}
        events.append({"name": f"error-{number}", "label": label, "time": time})
    return events


def usage_rows(task):
    """Each run's peak memory and CPU time, from the task's ``usage`` (core/limits.py);
    entries that are not what finish.lua writes are left out."""
    try:
        runs = json.loads(task.fields.get("usage") or "[]")
    except ValueError:
        return []
    rows = []
    for run in runs if isinstance(runs, list) else []:
        if not isinstance(run, dict):
            continue
        memory, cpu = finite_number(run.get("peak_memory")), finite_number(run.get("cpu"))
        if memory is None or cpu is None:
            continue
        rows.append({"attempt": run.get("attempt"), "peak_memory": size_text(memory),
                     "cpu": f"{cpu:,.2f} s", "time": unix_time(run.get("time"))})
    return rows


def _task_page(request, task_id):
    reader = Reader(get_client())
    polled = bool(request.GET.get("live"))
    task = reader.task(task_id, text_bytes=0 if polled else TEXT_BYTES)
    if task is None:
        raise Http404(_("No such task."))
    times = {name: unix_time(task.fields.get(name)) for name in TIME_FIELDS}
    dependencies = reader.dependencies(task)
    if polled:
        return live.task(task, times, dependencies)
    known = [name for name in FIELD_ORDER if name in task.fields]
    others = sorted(name for name in task.fields if name not in FIELD_ORDER)
    rows, texts = [], []
    history = parse_errors(task.fields) if task.fields.get("errors") else []
    for name in known + others:
        value, size = task.fields[name], task.cut.get(name)
        if name == "errors" and history:  # each run is on the timeline, a traceback below
            value = ngettext("%(count)d failed run, on the timeline",
                             "%(count)d failed runs, on the timeline",
                             len(history)) % {"count": len(history)}
            rows.append({"name": name, "value": value, "size": size, "time": None})
            continue
        if name in TEXT_FIELDS and not value:
            rows.append({"name": name, "value": value, "size": size, "time": None})
        elif name in TEXT_FIELDS:
            text, is_json, cut = pretty(value)
            texts.append({"name": name, "text": text, "json": is_json, "cut": cut,
                          "size": size})
        else:
            time = unix_time(value) if name in TIME_FIELDS else None
            rows.append({"name": name, "value": value, "size": size, "time": time,
                         "invalid": name in TIME_FIELDS and value != "" and time is None})
    timeline = sorted([{"name": name, "label": label, "time": times[name]}
                       for name, label in TIME_FIELDS.items() if times[name] is not None]
                      + error_events(task), key=lambda event: event["time"])
    try:
        live_url = page_url("blueque:task", args=[task_id]) + "?live=1"
    except NoReverseMatch:  # an id no URL path can hold: the page is not followed live
        live_url = None
    user = request.user
    task_actions = [action for action in actions.TASK_ACTIONS.values()
                    if action.applies_to(task.status) and user.has_perm(action.permission)]
    queue_name = task.queue if k.valid_name(task.queue, longest=MAX_NAME) else None
    return render(request, "django_blueque/task.html", admin_context(
        request, _("Task %(id)s") % {"id": task_id}, task=task, rows=rows, texts=texts,
        timeline=timeline, task_actions=task_actions, queue=queue_name,
        usage=usage_rows(task), checkpoint_time=times["checkpoint_at"],
        earlier_runs=[dict(run, number=number) for number, run in enumerate(history, 1)
                      if run["traceback"] and run["traceback"] != task.fields.get("traceback")],
        cancelled=task.status == k.FAILED and actions.is_cancelled(task.fields.get("error_type")),
        running=task.status in LIVE_STATUSES, live_url=live_url,
        held_for_key=task.status == k.PENDING and "held_since" in task.fields,
        live_version=live.task_version(task, dependencies), dependencies=dependencies,
        unreadable=reader.unreadable,
        after_delete=bq_queue_url(queue_name, task.status) if queue_name else
        page_url("blueque:dashboard")))


@require_GET
@staff_view()
def task(request, task_id):
    if not k.valid_name(task_id, longest=MAX_NAME):
        raise Http404(_("No such task."))
    return _task_page(request, task_id)


@require_GET
@staff_view(json=True)
def task_progress(request, task_id):
    """What the task page polls to move its progress bar."""
    if not k.valid_name(task_id, longest=MAX_NAME):
        raise Http404(_("No such task."))
    progress = Reader(get_client()).task_progress(task_id)
    if progress["status"] is None:
        raise Http404(_("No such task."))
    return JsonResponse(progress)


@require_GET
@staff_view()
def find(request):
    """Go to a task by its id, from the box on every page."""
    task_id = request.GET.get("id", "").strip()
    back = next_url(request, page_url("blueque:dashboard"))
    if not k.valid_name(task_id, longest=MAX_NAME):
        messages.error(request, _("Give a task id (no spaces) to find a task."))
        return redirect(back)
    if not Reader(get_client()).exists(task_id):
        messages.error(request, _("No task has the id “%(id)s”.") % {"id": task_id})
        return redirect(back)
    try:
        return redirect(page_url("blueque:task", args=[task_id]))
    except NoReverseMatch:
        return _task_page(request, task_id)  # an id no URL path can hold


@require_GET
@staff_view()
def listeners(request):
    reader = Reader(get_client())
    groups = group_listeners(reader.listeners())
    if request.GET.get("live"):
        return live.listeners(groups)
    return render(request, "django_blueque/listeners.html", admin_context(
        request, _("Listeners"), listeners=groups, unreadable=reader.unreadable,
        live_version=live.listeners_version(groups)))
