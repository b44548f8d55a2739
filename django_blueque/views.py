"""The Blueque admin pages: thin views over the read-only queries (queries.py) and the actions
(actions.py), rendered inside the Django admin's look.

Staff only: anonymous users are sent to the admin login, users without the permission get a
403. GET never changes anything; every action is a POST (CSRF-protected) that first renders a
confirmation page and acts only once confirmed. A malformed or unknown name is a 404.
"""

import hmac
import logging
import time
from functools import wraps
from urllib.parse import urlencode

import redis
from django.contrib import admin, messages
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import BadRequest, PermissionDenied
from django.http import Http404, HttpResponse, HttpResponseBadRequest, JsonResponse
from django.shortcuts import redirect, render
from django.urls import NoReverseMatch, reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, ngettext
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST

from . import actions
from .actions import BULK_ACTIONS
from .conf import get_client, get_settings
from .core import keys as k
from .queries import STATES, Reader, pretty, valid_name
from .templatetags.blueque_admin import bq_queue_url

logger = logging.getLogger("django_blueque.admin")

PER_PAGE = 100
PER_PAGE_CHOICES = (25, 50, 100, 200, 500)
MAX_SELECTED = 1000
LIVE_STATUSES = (k.SCHEDULED, k.PENDING, k.RESERVED, k.STARTED)
TIME_FIELDS = {
    "created": gettext_lazy("created"), "eta": gettext_lazy("due (eta)"),
    "started": gettext_lazy("started (this run)"), "updated": gettext_lazy("last update"),
    "finished": gettext_lazy("finished"), "expires": gettext_lazy("deleted after (retention)"),
    "cancel_requested": gettext_lazy("cancellation asked"),
}
TEXT_FIELDS = ("parameters", "result", "error", "traceback", "last_error")
FIELD_ORDER = k.PROTOCOL_FIELDS + k.EXTENSION_FIELDS


def _login_or_refuse(request, permission):
    """None if the user may go on; a redirect to the admin login for anonymous users."""
    user = request.user
    if not user.is_authenticated:
        return redirect_to_login(request.get_full_path(), reverse("admin:login"))
    if not (user.is_active and user.is_staff and user.has_perm(permission)):
        raise PermissionDenied
    return None


def _unavailable(request, exc):
    logger.warning("Redis unreachable from the admin: %s", exc)
    return render(request, "django_blueque/unavailable.html",
                  _context(request, _("Redis is unreachable"), error=str(exc)), status=503)


def staff_view(permission=actions.PERMISSIONS["view"]):
    """Staff with ``permission`` only; a page, not a 500, when Redis does not answer."""
    def decorator(view):
        @wraps(view)
        def wrapped(request, *args, **kwargs):
            refused = _login_or_refuse(request, permission)
            if refused is not None:
                return refused
            try:
                return view(request, *args, **kwargs)
            except (redis.ConnectionError, redis.TimeoutError) as exc:
                return _unavailable(request, exc)
        return never_cache(wrapped)
    return decorator


def metrics_view(view):
    """Staff with the view permission, or a scraper with ``BLUEQUE['METRICS_TOKEN']`` as a
    Bearer token (a wrong token is a 401, not a login page)."""
    staff = staff_view()(view)

    @wraps(view)
    def wrapped(request):
        header = request.headers.get("Authorization", "")
        if not header:
            return staff(request)
        token = get_settings().metrics_token
        scheme, _sep, given = header.partition(" ")
        if not (token and scheme.lower() == "bearer" and
                hmac.compare_digest(given.strip().encode(), token.encode())):
            response = HttpResponse(_("Invalid metrics token.\n"), status=401,
                                    content_type="text/plain; charset=utf-8")
            response["WWW-Authenticate"] = 'Bearer realm="blueque"'
            return response
        try:
            return view(request)
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            return HttpResponse(f"Redis unreachable: {exc}\n", status=503,
                                content_type="text/plain; charset=utf-8")
    return never_cache(wrapped)


def _context(request, title, **extra):
    """The admin's context, without its navigation sidebar: these pages are wide tables,
    and the sidebar's app list costs more to render than a page of tasks."""
    context = admin.site.each_context(request)
    context.update(title=title, is_nav_sidebar_enabled=False, **extra)
    return context


def _next_url(request, fallback):
    """The page to go back to: the form's ``next`` if it is on this site, else ``fallback``."""
    url = request.POST.get("next") or request.GET.get("next")
    if url and url_has_allowed_host_and_scheme(url, allowed_hosts={request.get_host()},
                                               require_https=request.is_secure()):
        return url
    return fallback


def _whole(value, default):
    """A positive whole number from a query parameter; None when malformed."""
    if value is None:
        return default
    return int(value) if value.isdigit() and 0 < len(value) < 10 and int(value) > 0 else None


def _task_url(task_id):
    try:
        return reverse("blueque:task", args=[task_id])
    except NoReverseMatch:
        return f"{reverse('blueque:find')}?{urlencode({'id': task_id})}"


# -- pages ---------------------------------------------------------------------------------------

@require_GET
@staff_view()
def dashboard(request):
    overview = Reader(get_client()).overview()
    return render(request, "django_blueque/dashboard.html",
                  _context(request, _("Blueque"), overview=overview, states=STATES))


@require_GET
@staff_view()
def queue(request):
    name = request.GET.get("name", "")
    state = request.GET.get("state", k.PENDING)
    page = _whole(request.GET.get("p"), 1)
    per_page = _whole(request.GET.get("per_page"), PER_PAGE)
    if not valid_name(name) or state not in STATES or page is None or (
            per_page not in PER_PAGE_CHOICES):
        raise Http404(_("No such queue or page."))
    data = Reader(get_client()).queue_page(name, state, page, per_page)
    if data is None:
        raise Http404(_("No such queue."))
    user = request.user
    task_actions = [action for action in actions.TASK_ACTIONS.values()
                    if state in action.statuses and user.has_perm(action.permission)]
    bulk = [action for action, bulk_state in BULK_ACTIONS
            if bulk_state == state and user.has_perm(actions.bulk_permission(action))]
    pages = data["pages"]
    links = {"first": 1, "previous": data["page"] - 1, "next": data["page"] + 1, "last": pages}
    links = {label: bq_queue_url(name, state, number) + (
        f"&per_page={per_page}" if per_page != PER_PAGE else "")
        for label, number in links.items() if 1 <= number <= pages and number != data["page"]}
    return render(request, "django_blueque/queue.html", _context(
        request, _("Queue %(queue)s: %(state)s") % {"queue": name, "state": state},
        queue=name, state=state, tabs=[(tab, data["counts"][tab]) for tab in STATES],
        task_actions=task_actions, bulk_actions=bulk,
        page_links=links, per_page_choices=PER_PAGE_CHOICES, **data))


def _task_page(request, task_id):
    task = Reader(get_client()).task(task_id)
    if task is None:
        raise Http404(_("No such task."))
    known = [name for name in FIELD_ORDER if name in task.fields]
    others = sorted(name for name in task.fields if name not in FIELD_ORDER)
    rows, texts = [], []
    for name in known + others:
        value = task.fields[name]
        if name in TEXT_FIELDS:
            text, is_json, cut = pretty(value)
            texts.append({"name": name, "text": text, "json": is_json, "cut": cut})
        else:
            rows.append({"name": name, "value": value,
                         "time": getattr(task, name) if name in TIME_FIELDS else None})
    timeline = sorted(
        ({"label": label, "time": getattr(task, name)} for name, label in TIME_FIELDS.items()
         if getattr(task, name) is not None), key=lambda event: event["time"])
    user = request.user
    task_actions = [action for action in actions.TASK_ACTIONS.values()
                    if action.applies_to(task.status) and user.has_perm(action.permission)]
    queue_name = task.queue if task.queue and valid_name(task.queue) else None
    return render(request, "django_blueque/task.html", _context(
        request, _("Task %(id)s") % {"id": task_id}, task=task, rows=rows, texts=texts,
        timeline=timeline, task_actions=task_actions, queue=queue_name,
        live=task.status in LIVE_STATUSES,
        after_delete=bq_queue_url(queue_name, task.status) if queue_name else
        reverse("blueque:dashboard")))


@require_GET
@staff_view()
def task(request, task_id):
    if not valid_name(task_id):
        raise Http404(_("No such task."))
    return _task_page(request, task_id)


@require_GET
@staff_view()
def task_progress(request, task_id):
    """What the task page polls to move its progress bar."""
    if not valid_name(task_id):
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
    back = _next_url(request, reverse("blueque:dashboard"))
    if not valid_name(task_id):
        messages.error(request, _("Give a task id (no spaces) to find a task."))
        return redirect(back)
    if not Reader(get_client()).exists(task_id):
        messages.error(request, _("No task has the id “%(id)s”.") % {"id": task_id})
        return redirect(back)
    try:
        return redirect(reverse("blueque:task", args=[task_id]))
    except NoReverseMatch:
        return _task_page(request, task_id)  # an id no URL path can hold


@require_GET
@staff_view()
def listeners(request):
    found = Reader(get_client()).listeners()
    return render(request, "django_blueque/listeners.html", _context(
        request, _("Listeners"), listeners=found, now=time.time()))


@require_GET
@metrics_view
def metrics_json(request):
    overview = Reader(get_client()).overview()
    return JsonResponse({
        "time": overview.now,
        "queues": [{
            "name": queue.name, "task": queue.task,
            "counts": queue.counts, "oldest_pending_age": queue.oldest_pending_age,
            "listeners": {"live": len(queue.live), "stale": len(queue.stale),
                          "v1": len(queue.v1)},
            "bulk_jobs": [job.as_dict() for job in queue.jobs],
        } for queue in overview.queues],
        "listeners": [{
            "id": listener.id, "queue": listener.queue, "host": listener.host,
            "pid": listener.pid, "state": listener.kind,
            "heartbeat_age": listener.heartbeat_age, "held": listener.held,
        } for listener in overview.listeners],
        "periodic": overview.periodic,
    })


def _label(value):
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


@require_GET
@metrics_view
def metrics(request):
    """The dashboard's figures in Prometheus' text format."""
    overview = Reader(get_client()).overview()
    lines = []

    def family(name, kind, help_text, samples):
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} {kind}")
        for labels, value in samples:
            text = ",".join(f'{key}="{_label(val)}"' for key, val in labels.items())
            number = value if isinstance(value, int) else repr(float(value))
            lines.append(f"{name}{{{text}}} {number}")

    queues = overview.queues
    family("blueque_tasks", "gauge", "Tasks of a queue in each state.",
           [({"queue": q.name, "state": state}, q.counts[state])
            for q in queues for state in STATES])
    family("blueque_listeners", "gauge", "Listeners of a queue: live, stale (heartbeat "
           "expired) and v1 (blueque 1.0, no heartbeat).",
           [({"queue": q.name, "state": kind}, len(q.listeners_of(kind)))
            for q in queues for kind in ("live", "stale", "v1")])
    family("blueque_oldest_pending_age_seconds", "gauge", "How long the oldest pending task "
           "of a queue has been waiting (0 when none waits).",
           [({"queue": q.name}, q.oldest_pending_age or 0.0) for q in queues])
    family("blueque_listener_heartbeat_age_seconds", "gauge",
           "Seconds since a listener's last heartbeat.",
           [({"queue": listener.queue, "listener": listener.id}, listener.heartbeat_age)
            for listener in overview.listeners if listener.heartbeat_age is not None])
    family("blueque_listener_held_tasks", "gauge",
           "Tasks in a listener's reserved list (reserved and started).",
           [({"queue": listener.queue, "listener": listener.id}, listener.held)
            for listener in overview.listeners])
    family("blueque_bulk_jobs_running", "gauge", "Bulk actions running on a queue.",
           [({"queue": q.name}, len(q.jobs)) for q in queues])
    return HttpResponse("\n".join(lines) + "\n",
                        content_type="text/plain; version=0.0.4; charset=utf-8")


# -- actions --------------------------------------------------------------------------------------

def _done_message(action, count):
    if action.name == "retry":
        text = ngettext("Retried %(count)d task: it is back in its queue.",
                        "Retried %(count)d tasks: they are back in their queue.", count)
    elif action.name == "run_now":
        text = ngettext("Sent %(count)d scheduled task to its queue.",
                        "Sent %(count)d scheduled tasks to their queue.", count)
    elif action.name == "cancel":
        text = ngettext("Cancelled %(count)d task (a running one is stopped by its listener "
                        "within seconds).", "Cancelled %(count)d tasks (running ones are "
                        "stopped by their listener within seconds).", count)
    elif action.name == "mark_failed":
        text = ngettext("Marked %(count)d task failed.", "Marked %(count)d tasks failed.",
                        count)
    else:
        text = ngettext("Deleted %(count)d task.", "Deleted %(count)d tasks.", count)
    return text % {"count": count}


@require_POST
@staff_view()
def task_action(request):
    """Retry, run now, cancel, mark failed or delete chosen tasks, once confirmed."""
    action = actions.TASK_ACTIONS.get(request.POST.get("action", ""))
    if action is None:
        return HttpResponseBadRequest(_("Unknown action."))
    if not request.user.has_perm(action.permission):
        raise PermissionDenied
    back = _next_url(request, reverse("blueque:dashboard"))
    ids = list(dict.fromkeys(request.POST.getlist("ids")))
    if not ids:
        messages.warning(request, _("No task was selected: nothing was done."))
        return redirect(back)
    if len(ids) > MAX_SELECTED or not all(valid_name(task_id) for task_id in ids):
        return HttpResponseBadRequest(_("Malformed task ids."))
    states = Reader(get_client()).task_states(ids)
    if request.POST.get("confirm") != "yes":
        rows = [{"id": task_id, "status": status, "queue": queue,
                 "applies": action.applies_to(status), "url": _task_url(task_id)}
                for task_id, (status, queue) in states.items()]
        return render(request, "django_blueque/confirm.html", _context(
            request, _("Are you sure?"), action=action, rows=rows, ids=ids, next=back,
            target=reverse("blueque:action"), question=action.question,
            button=action.label, applicable=sum(row["applies"] for row in rows)))
    done, skipped = actions.run_task_action(action, states, request.user)
    if done:
        messages.success(request, _done_message(action, len(done)))
    if skipped:
        messages.warning(request, ngettext(
            "%(count)d task was left alone: its status does not allow it (any more).",
            "%(count)d tasks were left alone: their status does not allow it (any more).",
            len(skipped)) % {"count": len(skipped)})
    return redirect(back)


@require_POST
@staff_view(actions.PERMISSIONS["retry"])
def requeue_listener(request):
    """Release a dead listener: its unstarted tasks go back to the queue."""
    queue_name = request.POST.get("queue", "")
    listener_id = request.POST.get("listener", "")
    if not valid_name(queue_name) or not valid_name(listener_id):
        return HttpResponseBadRequest(_("Malformed queue or listener."))
    back = reverse("blueque:listeners")
    member, expires = Reader(get_client()).listener_state(queue_name, listener_id)
    names = {"listener": listener_id, "queue": queue_name}
    if not member:
        messages.warning(request, _("Listener %(listener)s is not registered on queue "
                                    "%(queue)s (any more): nothing to requeue.") % names)
        return redirect(back)
    if expires is not None and expires >= time.time():
        messages.error(request, _("Listener %(listener)s is alive (its heartbeat is fresh): "
                                  "only a dead listener's tasks can be requeued.") % names)
        return redirect(back)
    if request.POST.get("confirm") != "yes":
        question = _("Release listener %(listener)s from queue %(queue)s? The tasks it "
                     "reserved and had not started go back to the queue; its started tasks "
                     "are recovered by the reaper once their lease expires.") % names
        if expires is None:
            question += " " + _("It is a blueque 1.0 listener (no heartbeat): make sure its "
                                "process is gone, or its tasks may run twice.")
        return render(request, "django_blueque/confirm.html", _context(
            request, _("Are you sure?"), question=question, next=back,
            target=reverse("blueque:requeue_listener"), button=_("Requeue its tasks"),
            fields={"queue": queue_name, "listener": listener_id}))
    released = actions.requeue_listener(queue_name, listener_id, request.user)
    if released is None:
        messages.warning(request, _("Listener %(listener)s was released meanwhile by someone "
                                    "else (the reaper?).") % names)
        return redirect(back)
    requeued, started = released
    messages.success(request, ngettext(
        "Released listener %(listener)s: %(count)d task went back to queue %(queue)s.",
        "Released listener %(listener)s: %(count)d tasks went back to queue %(queue)s.",
        len(requeued)) % dict(names, count=len(requeued)))
    if started:
        messages.info(request, ngettext(
            "%(count)d started task is left to the reaper, which recovers it once its lease "
            "expires.", "%(count)d started tasks are left to the reaper, which recovers them "
            "once their lease expires.", len(started)) % {"count": len(started)})
    return redirect(back)


def _bulk_params(data):
    """(action, state, queue) of a bulk job named in a form or query string, else None."""
    action, state = data.get("action", ""), data.get("state", "")
    queue_name = data.get("queue", "")
    if (action, state) not in BULK_ACTIONS or not valid_name(queue_name):
        return None
    return action, state, queue_name


def _bulk_url(action, state, queue_name):
    query = urlencode({"action": action, "state": state, "queue": queue_name})
    return f"{reverse('blueque:bulk_job')}?{query}"


def _bulk_title(action, state, queue_name):
    names = {"state": state, "queue": queue_name}
    if action == "retry":
        return _("Retry every failed task of queue %(queue)s") % names
    return _("Delete every %(state)s task of queue %(queue)s") % names


def _bulk_request(request, data):
    """The checked job parameters of a bulk POST: 400 if malformed, 403 without the right."""
    params = _bulk_params(data)
    if params is None:
        raise BadRequest(_("No such bulk action."))
    if not request.user.has_perm(actions.bulk_permission(params[0])):
        raise PermissionDenied
    return params


@require_POST
@staff_view()
def bulk_start(request):
    """Start retrying or deleting a whole list, once confirmed."""
    params = _bulk_request(request, request.POST)
    action, state, queue_name = params
    if request.POST.get("confirm") != "yes":
        count = Reader(get_client()).length(queue_name, state)
        question = ngettext(
            "%(action)s: %(count)d task now. It runs in batches in the background, from the "
            "oldest; tasks that arrive meanwhile are left alone.",
            "%(action)s: %(count)d tasks now. It runs in batches in the background, from the "
            "oldest; tasks that arrive meanwhile are left alone.",
            count) % {"action": _bulk_title(*params), "count": count}
        return render(request, "django_blueque/confirm.html", _context(
            request, _("Are you sure?"), question=question,
            next=bq_queue_url(queue_name, state), target=reverse("blueque:bulk_start"),
            button=_("Retry them all") if action == "retry" else _("Delete them all"),
            fields={"action": action, "state": state, "queue": queue_name}))
    if not actions.start_bulk(action, state, queue_name, request.user):
        messages.info(request, _("This job was already running: here is its progress."))
    return redirect(_bulk_url(*params))


@require_GET
@staff_view()
def bulk_job(request):
    """A bulk job's progress; its page advances it (POSTs to bulk_step) while it runs."""
    params = _bulk_params(request.GET)
    if params is None:
        raise Http404(_("No such bulk action."))
    job = Reader(get_client()).bulk_job(*params)
    if job is None:
        raise Http404(_("No such bulk job (a finished job's record is kept for a day)."))
    can_run = request.user.has_perm(actions.bulk_permission(params[0]))
    return render(request, "django_blueque/bulk_job.html", _context(
        request, _bulk_title(*params), job=job, can_run=can_run,
        queue_url=bq_queue_url(params[2], params[1]),
        fields={"action": params[0], "state": params[1], "queue": params[2]}))


@require_POST
@staff_view()
def bulk_step(request):
    """Run the job's next batches for a fraction of a second; JSON for the page's script."""
    params = _bulk_request(request, request.POST)
    actions.step_bulk(*params)
    job = Reader(get_client()).bulk_job(*params)
    if job is None:
        raise Http404(_("No such bulk job."))
    if "application/json" in request.headers.get("Accept", ""):
        return JsonResponse(job.as_dict())
    return redirect(_bulk_url(*params))


@require_POST
@staff_view()
def bulk_stop(request):
    params = _bulk_request(request, request.POST)
    if actions.stop_bulk(*params, request.user):
        messages.success(request, _("The job is stopped; what it did stays done."))
    else:
        messages.info(request, _("The job was not running."))
    return redirect(_bulk_url(*params))
