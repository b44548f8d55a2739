"""The POST views that change something, each after a confirmation page: actions on chosen
tasks, releasing a dead listener, and the bulk jobs."""

import time
from urllib.parse import urlencode

from django.contrib import messages
from django.core.exceptions import BadRequest, PermissionDenied
from django.http import Http404, HttpResponseBadRequest, JsonResponse
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.utils.translation import ngettext
from django.views.decorators.http import require_GET, require_POST

from .. import actions
from ..conf import get_client
from ..core import keys as k
from ..core import protocol_admin
from ..core.bulk import BULK_ACTIONS
from ..mount import page_url
from ..queries import MAX_NAME, Reader
from ..rows import state_label
from ..templatetags.blueque_admin import bq_queue_url
from .common import admin_context, next_url, staff_view, task_url

MAX_SELECTED = 1000
"""Most tasks one action may be asked for."""


def _done_message(action, count):
    if action.name == "retry":
        text = ngettext("Retried %(count)d task: it went back to its queue.",
                        "Retried %(count)d tasks: they went back to their queue.", count)
    elif action.name == "start_over":
        text = ngettext("Started %(count)d task over: its checkpoint is cleared.",
                        "Started %(count)d tasks over: their checkpoints are cleared.", count)
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


def _say_failed_again(request, retried):
    """A retried task a listener took and failed again before this answer: say so, or the
    success message would sit above a task already failed again."""
    again = [task_id for task_id, (status, _queue) in
             Reader(get_client()).task_states(retried).items() if status == k.FAILED]
    if again:
        messages.warning(request, ngettext(
            "%(count)d retried task has already failed again: its error is on its page.",
            "%(count)d retried tasks have already failed again: their errors are on their "
            "pages.", len(again)) % {"count": len(again)})


@require_POST
@staff_view()
def task_action(request):
    """Retry, run now, cancel, mark failed or delete chosen tasks, once confirmed."""
    action = actions.TASK_ACTIONS.get(request.POST.get("action", ""))
    if action is None:
        return HttpResponseBadRequest(_("Unknown action."))
    if not request.user.has_perm(action.permission):
        raise PermissionDenied
    back = next_url(request, page_url("blueque:dashboard"))
    ids = list(dict.fromkeys(request.POST.getlist("ids")))
    if not ids:
        messages.warning(request, _("No task was selected: nothing was done."))
        return redirect(back)
    if len(ids) > MAX_SELECTED or not all(k.valid_name(task_id, longest=MAX_NAME)
                                          for task_id in ids):
        return HttpResponseBadRequest(_("Malformed task ids."))
    states = Reader(get_client()).task_states(ids)
    if request.POST.get("confirm") != "yes":
        rows = [{"id": task_id, "status": status, "queue": queue,
                 "applies": action.applies_to(status), "url": task_url(task_id)}
                for task_id, (status, queue) in states.items()]
        return render(request, "django_blueque/confirm.html", admin_context(
            request, _("Are you sure?"), action=action, rows=rows, ids=ids, next=back,
            target=page_url("blueque:action"), question=action.question,
            applicable=sum(row["applies"] for row in rows)))
    done, skipped, deep = actions.run_task_action(action, states, request.user)
    if done:
        messages.success(request, _done_message(action, len(done)))
    if done and action.name == "retry":
        _say_failed_again(request, done)
    if skipped:
        messages.warning(request, ngettext(
            "%(count)d task was left alone: its status does not allow it (any more).",
            "%(count)d tasks were left alone: their status does not allow it (any more).",
            len(skipped)) % {"count": len(skipped)})
    if deep:
        messages.warning(request, ngettext(
            "%(count)d task was left alone: it is more than %(window)d places from both ends of "
            "its list, and taking it out would make Redis scan the whole list. The bulk action "
            "of the list (retry or delete them all) reaches it.",
            "%(count)d tasks were left alone: they are more than %(window)d places from both "
            "ends of their list, and taking them out would make Redis scan the whole list. The "
            "bulk action of the list (retry or delete them all) reaches them.",
            len(deep)) % {"count": len(deep), "window": protocol_admin.UNLIST_WINDOW})
    return redirect(back)


@require_POST
@staff_view(actions.PERMISSIONS["retry"])
def requeue_listener(request):
    """Release a dead listener: its unstarted tasks go back to the queue."""
    queue_name = request.POST.get("queue", "")
    listener_id = request.POST.get("listener", "")
    if not (k.valid_name(queue_name, longest=MAX_NAME)
            and k.valid_name(listener_id, longest=MAX_NAME)):
        return HttpResponseBadRequest(_("Malformed queue or listener."))
    back = page_url("blueque:listeners")
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
        return render(request, "django_blueque/confirm.html", admin_context(
            request, _("Are you sure?"), question=question, next=back,
            target=page_url("blueque:requeue_listener"),
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
    if (action, state) not in BULK_ACTIONS or not k.valid_name(queue_name, longest=MAX_NAME):
        return None
    return action, state, queue_name


def _bulk_url(action, state, queue_name):
    query = urlencode({"action": action, "state": state, "queue": queue_name})
    return f"{page_url('blueque:bulk_job')}?{query}"


def _bulk_title(action, state, queue_name):
    names = {"state": state_label(state), "queue": queue_name}
    if action == "retry":
        return _("Retry every failed task of queue %(queue)s") % names
    if action == "cancel":
        return _("Cancel every pending task of queue %(queue)s") % names
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
    """Start retrying, deleting or cancelling a whole list, once confirmed."""
    params = _bulk_request(request, request.POST)
    action, state, queue_name = params
    cancelled = action == "retry" and request.POST.get("cancelled") == "yes"
    if request.POST.get("confirm") != "yes":
        count = Reader(get_client()).length(queue_name, state)
        question = ngettext(
            "%(action)s: %(count)d task now. It runs in batches in the background, from the "
            "oldest; tasks that arrive meanwhile are left alone.",
            "%(action)s: %(count)d tasks now. It runs in batches in the background, from the "
            "oldest; tasks that arrive meanwhile are left alone.",
            count) % {"action": _bulk_title(*params), "count": count}
        if action == "retry":
            question += " " + (_("Cancelled tasks are retried too, as asked.") if cancelled
                               else _("Cancelled tasks stay cancelled (failed)."))
        return render(request, "django_blueque/confirm.html", admin_context(
            request, _("Are you sure?"), question=question,
            next=bq_queue_url(queue_name, state), target=page_url("blueque:bulk_start"),
            fields={"action": action, "state": state, "queue": queue_name,
                    "cancelled": "yes" if cancelled else "no"}))
    if not actions.start_bulk(action, state, queue_name, request.user, cancelled):
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
    return render(request, "django_blueque/bulk_job.html", admin_context(
        request, _bulk_title(*params), job=job, can_run=can_run,
        queue_url=bq_queue_url(params[2], params[1]),
        fields={"action": params[0], "state": params[1], "queue": params[2]}))


@require_POST
@staff_view(json=True)
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
