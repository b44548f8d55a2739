"""The JSON API: what the admin pages read and do, for scripts.

Under the admin pages' path (``<blueque>/api/...``; reference: docs/reference/json-api.rst).
Who may call: a staff session, with the admin's permissions and its CSRF rule for POST; or
``Authorization: Bearer <token>`` with a token of ``BLUEQUE["API_TOKENS"]``, which acts as the
user it names, with that user's permissions (no cookie is involved, so no CSRF token either).
Every answer is JSON, errors too: ``{"error": "..."}`` with 400 (a malformed parameter), 401,
403, 404, 405, 409 (Redis refused, or the bulk job runs already) or 503 (Redis unreachable).

Every request costs what it returns, as the pages do: counts are LLEN/ZCARD, lists are one
window of at most MAX_LIMIT tasks, a task is its hash cut as its page cuts it, an action is
one script per task, and a whole list is changed by a resumable bulk job, never one request.
"""

import hmac
import json
import re
from functools import wraps

import redis
from django.contrib.auth import get_user_model
from django.http import JsonResponse
from django.middleware.csrf import CsrfViewMiddleware
from django.utils.decorators import decorator_from_middleware
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import csrf_exempt

from .. import actions
from ..conf import get_client, get_settings
from ..core import keys as k
from ..core.bulk import BULK_ACTIONS
from ..core.values import parse_errors
from ..queries import MAX_EDGES, MAX_NAME, Reader
from ..queries.workflow_readers import task_ids_of
from ..rows import STATES
from .actions import MAX_SELECTED

DEFAULT_LIMIT = 100
MAX_LIMIT = 500
"""Most tasks one list request returns."""

_CURSOR = re.compile(r"^([tp])([0-9]{1,12})$")


class ApiError(Exception):
    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


def _answer(status, message, **extra):
    return JsonResponse({"error": message, **extra}, status=status)


class _JsonCsrf(CsrfViewMiddleware):
    """Django's CSRF rule for a session's requests, its refusal in JSON like every answer of
    the API (Django's own is its HTML failure page)."""

    def _reject(self, request, reason):
        super()._reject(request, reason)  # logged as Django logs a refusal
        return _answer(403, f"CSRF verification failed: {reason}")


_csrf_protect = decorator_from_middleware(_JsonCsrf)


def _token_user(given):
    """The active user a Bearer token of API_TOKENS names, else None."""
    username = None
    for token, name in get_settings().api_tokens.items():
        if hmac.compare_digest(given.encode(), token.encode()):
            username = name
    if username is None:
        return None
    model = get_user_model()
    return model._default_manager.filter(
        **{model.USERNAME_FIELD: username, "is_active": True}).first()


def api_view(*methods):
    """A view of the API: its methods, its callers (see the module's docstring), its errors
    as JSON. The view runs with the caller in ``request.user``, holding the view permission."""
    def decorator(view):
        @wraps(view)
        def wrapped(request, *args, **kwargs):
            if request.method not in methods:
                return _answer(405, f"use {' or '.join(methods)}")
            scheme, _sep, given = request.headers.get("Authorization", "").partition(" ")
            run = view
            if scheme.lower() == "bearer":
                request.user = _token_user(given.strip())
                if request.user is None:
                    response = _answer(401, "invalid API token")
                    response["WWW-Authenticate"] = 'Bearer realm="blueque"'
                    return response
            elif not request.user.is_authenticated:
                return _answer(401, "log in to the admin, or send a Bearer token of "
                                    "BLUEQUE['API_TOKENS']")
            else:
                run = _csrf_protect(view)  # a session's POST carries the CSRF token
            user = request.user
            if not (user.is_active and user.is_staff and user.has_perm(
                    actions.PERMISSIONS["view"])):
                return _answer(403, f"{user.get_username()} may not view the tasks")
            try:
                return run(request, *args, **kwargs)
            except ApiError as exc:
                return _answer(exc.status, str(exc))
            except (redis.ConnectionError, redis.TimeoutError) as exc:
                return _answer(503, f"Redis unreachable: {exc}")
            except redis.ResponseError as exc:
                return _answer(409, f"Redis refused: {exc}")
        return csrf_exempt(never_cache(wrapped))
    return decorator


def _require(user, permission):
    if not user.has_perm(permission):
        raise ApiError(403, f"{user.get_username()} lacks the permission {permission}")


def _name(value, what):
    if value is None or not k.valid_name(value, longest=MAX_NAME):
        raise ApiError(400 if value is None else 404, f"no such {what}: {value!r}")
    return value


def _number(data, name, default, highest):
    value = data.get(name)
    if value is None:
        return default
    if not (isinstance(value, str) and value.isdigit() and 0 < int(value) <= highest):
        raise ApiError(400, f"{name} must be a whole number from 1 to {highest}")
    return int(value)


def _row(task):
    """A task of a list: its id and the fields of the list pages (``parameters`` and
    ``error`` cut to a preview: its own URL has them whole); ``score``: the eta of a
    scheduled task, the time a task of an error type's list failed."""
    return {"id": task.id, **task.fields, **({"score": task.score}
                                             if task.score is not None else {})}


def _body(request):
    try:
        data = json.loads(request.body or b"{}")
    except ValueError:
        raise ApiError(400, "the body must be a JSON object") from None
    if not isinstance(data, dict):
        raise ApiError(400, "the body must be a JSON object")
    return data


# -- reading -----------------------------------------------------------------------------------

@api_view("GET")
def queues(request):
    """Every queue's counts by state, as metrics.json has them, a page of queues at a time
    (queries.QUEUES_PER_PAGE)."""
    page = _number(request.GET, "page", 1, 10**6)
    return JsonResponse(Reader(get_client()).overview(page=page).as_dict(),
                        json_dumps_params={"allow_nan": False})


@api_view("GET")
def counts(request):
    """One queue's counts by state, and its failed tasks by error type."""
    queue = _name(request.GET.get("queue"), "queue")
    error_type = request.GET.get("error_type")
    data = Reader(get_client()).queue_page(queue, k.FAILED, 1, 1, error_type)
    if data is None:
        raise ApiError(404, f"no such queue: {queue!r}")
    answer = {"queue": queue, "counts": data["counts"], "error_types": dict(data["error_types"])}
    if error_type is not None:
        answer["error_type"] = {"name": error_type, "failed": data["total"]}
    return JsonResponse(answer)


@api_view("GET")
def tasks(request):
    """A queue's tasks of one state, newest first, ``limit`` at a time: pass the answer's
    ``next`` back as ``cursor`` for the next ones (``null``: there are no more)."""
    queue = _name(request.GET.get("queue"), "queue")
    state = request.GET.get("state", k.PENDING)
    error_type = request.GET.get("error_type")
    if state not in STATES or (error_type is not None and state != k.FAILED):
        raise ApiError(400, "state must be one of " + ", ".join(STATES) +
                       " (error_type goes with failed)")
    limit = _number(request.GET, "limit", DEFAULT_LIMIT, MAX_LIMIT)
    cursor = request.GET.get("cursor")
    found = _CURSOR.match(cursor or "")
    if cursor is not None and (found is None or (found[1] == "t") != (state in k.FINISHED)):
        raise ApiError(400, f"malformed cursor {cursor!r}: pass back an answer's next")
    position = int(found[2]) if found else None
    reader = Reader(get_client())
    if state in k.FINISHED:
        window = reader.finished_window(queue, state, limit, position, error_type)
        if window is None:
            raise ApiError(404, f"no such queue: {queue!r}")
        rows, total, below = window
        after = None if below is None else f"t{below}"
    else:
        page = position or 1
        data = reader.queue_page(queue, state, page, limit)
        if data is None:
            raise ApiError(404, f"no such queue: {queue!r}")
        total = data["total"]
        # queue_page shows the last page for one past it: a cursor past it has nothing
        rows = data["tasks"] if page <= data["pages"] else []
        after = f"p{page + 1}" if page < data["pages"] else None
    return JsonResponse({"queue": queue, "state": state, "total": total,
                         "tasks": [_row(task) for task in rows], "next": after},
                        json_dumps_params={"allow_nan": False})


@api_view("GET")
def task(request, task_id):
    """One task: its fields (long ones cut as its page cuts them: ``cut`` gives their full
    length in bytes) and its error history."""
    _name(task_id, "task")
    found = Reader(get_client()).task(task_id)
    if found is None or not found.fields:
        raise ApiError(404, f"no such task: {task_id!r}")
    return JsonResponse({"id": task_id, "fields": found.fields, "cut": found.cut,
                         "hidden_fields": found.hidden, "errors": parse_errors(found.fields)},
                        json_dumps_params={"allow_nan": False})


def _workflow_row(row):
    return {"id": row.id, "status": row.status, "queue": row.queue,
            "depends_on": task_ids_of(row.fields.get("depends_on"), MAX_EDGES)}


@api_view("GET")
def workflow(request, workflow_id):
    """A workflow (chain, group): its tasks in the order written, each with its status, queue
    and the ids it waits for, and its progress (tasks by status)."""
    _name(workflow_id, "workflow")
    reader = Reader(get_client())
    found = reader.workflow(workflow_id)
    if found is None:
        raise ApiError(404, f"no such workflow: {workflow_id!r}")
    if reader.unreadable:
        raise ApiError(409, f"unreadable: {', '.join(reader.unreadable)}")
    return JsonResponse({"id": workflow_id, "total": found["total"],
                         "progress": found["progress"],
                         "tasks": [_workflow_row(row) for row in found["tasks"]]})


# -- changing ----------------------------------------------------------------------------------

@api_view("POST")
def task_actions(request):
    """``{"action": "retry" | "run_now" | "cancel" | "mark_failed" | "delete", "ids": [...]}``:
    the admin's action on each task it applies to. Answers the ids ``done``, ``skipped`` (its
    status does not allow it) and ``too_deep`` (see protocol_admin.UNLIST_WINDOW)."""
    data = _body(request)
    action = actions.TASK_ACTIONS.get(data.get("action"))
    if action is None:
        raise ApiError(400, "action must be one of " + ", ".join(actions.TASK_ACTIONS))
    _require(request.user, action.permission)
    ids = data.get("ids")
    if not (isinstance(ids, list) and 0 < len(ids) <= MAX_SELECTED and all(
            isinstance(task_id, str) and k.valid_name(task_id, longest=MAX_NAME)
            for task_id in ids)):
        raise ApiError(400, f"ids must be a list of 1 to {MAX_SELECTED} task ids")
    states = Reader(get_client()).task_states(list(dict.fromkeys(ids)))
    done, skipped, deep = actions.run_task_action(action, states, request.user)
    return JsonResponse({"action": action.name, "done": done, "skipped": skipped,
                         "too_deep": deep})


def _bulk_params(data, user):
    params = data.get("action"), data.get("state"), data.get("queue")
    if params[:2] not in BULK_ACTIONS or not (
            isinstance(params[2], str) and k.valid_name(params[2], longest=MAX_NAME)):
        raise ApiError(400, "action and state must be one of " + ", ".join(
            f"{action} {state}" for action, state in BULK_ACTIONS) + ", with a queue")
    _require(user, actions.bulk_permission(params[0]))
    return params


@api_view("GET", "POST")
def bulk(request):
    """GET ``?action=&state=&queue=``: a bulk job's progress. POST ``{"action", "state",
    "queue", "with_cancelled": false}``: start retrying or deleting every task of a list
    (201; 409 if that job runs already). The reaper's loop runs it to the end; ``"stop":
    true`` in a POST stops it between two batches instead."""
    if request.method == "GET":
        action, state, queue = _bulk_params(request.GET, request.user)
        job = Reader(get_client()).bulk_job(action, state, queue)
        if job is None:
            raise ApiError(404, "no such bulk job (a finished job's record is kept a day)")
        return JsonResponse(job.as_dict())
    data = _body(request)
    action, state, queue = _bulk_params(data, request.user)
    if data.get("stop") is True:
        stopped = actions.stop_bulk(action, state, queue, request.user)
        status = 200 if stopped else 409
    else:
        started = actions.start_bulk(action, state, queue, request.user,
                                     data.get("with_cancelled") is True)
        status = 201 if started else 409
    job = Reader(get_client()).bulk_job(action, state, queue)
    return JsonResponse(job.as_dict() if job else {}, status=status)
