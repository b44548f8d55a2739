"""Property: whatever values of whatever Redis types sit in the protocol's keys and task
fields, every admin page, endpoint and action answers (no 500, no exception), metrics.json is
strict JSON, and bq_status prints. Written with plain redis-py, as anyone could.

BLUEQUE_HYPOTHESIS_EXAMPLES sets the number of examples (default 40: about 20 s)."""

import io
import json
import os

from django.core.management import call_command
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from django_blueque.core import keys as k
from django_blueque.core.bulk import BULK_ACTIONS
from django_blueque.rows import STATES
from tests.garbage import contents, write

from .helpers import url

QUEUES = ("q1", "demo.long")  # a foreign queue and a registered one
TASKS = ("t1", "t2")
LISTENERS = ("h_1", "h_2")
KEYS = k.Keys()

CONTENT = contents([*TASKS, *LISTENERS, *QUEUES, *STATES, "h_1 123 t1", "h_2 99999999999 t2"])


def protocol_keys():
    """Every key of keys.py for the queues, tasks and listeners above."""
    names = [KEYS.queues]
    for queue in QUEUES:
        names += [KEYS.pending(queue), KEYS.scheduled(queue), KEYS.started(queue),
                  KEYS.complete(queue), KEYS.failed(queue), KEYS.listeners(queue),
                  KEYS.listener_leases(queue)]
        names += [KEYS.reserved(queue, listener) for listener in LISTENERS]
        names += [KEYS.bulk_job(f"{action}_{state}_{queue}") for action, state in BULK_ACTIONS]
    names += [KEYS.task(task_id) for task_id in TASKS] + [KEYS.lease(t) for t in TASKS]
    names += [KEYS.listener_info(listener) for listener in LISTENERS]
    names += [KEYS.cancels(listener, "") for listener in LISTENERS]
    names += [KEYS.periodic("demo.tick"), KEYS.bulk_running("")]
    return names


def requests():
    """(method, path, data) of every page, endpoint and action."""
    gets = [url(""), url("", q="q"), url("", p=2), url("metrics.json"), url("metrics/"),
            url("listeners/")]
    gets += [url("", name=queue, state=state) for queue in QUEUES for state in STATES]
    gets += [url(f"tasks/{task_id}/") for task_id in TASKS]
    gets += [url(f"tasks/{task_id}/progress/") for task_id in TASKS]
    gets += [url("find/", id=task_id) for task_id in TASKS]
    bulk = [{"action": action, "state": state, "queue": queue}
            for action, state in BULK_ACTIONS for queue in QUEUES]
    gets += [url("bulk/", **form) for form in bulk]
    posts = [(url("actions/"), {"action": action, "ids": list(TASKS), "confirm": confirm,
                                "next": url("")})
             for action in ("retry", "run_now", "cancel", "mark_failed", "delete")
             for confirm in ("", "yes")]
    posts += [(url("listeners/requeue/"), {"queue": queue, "listener": listener,
                                           "confirm": "yes"})
              for queue in QUEUES for listener in LISTENERS]
    for form in bulk:
        posts += [(url("bulk/start/"), dict(form, confirm="yes")), (url("bulk/step/"), form),
                  (url("bulk/stop/"), form)]
    return [("get", path, None) for path in gets] + [("post", path, data)
                                                     for path, data in posts]


def no_constants(constant):
    raise ValueError(f"{constant} is not JSON")


@settings(max_examples=int(os.environ.get("BLUEQUE_HYPOTHESIS_EXAMPLES", 40)), deadline=None,
          database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(contents=st.fixed_dictionaries({key: CONTENT for key in protocol_keys()}))
def test_any_data_in_any_key_never_breaks_a_page_or_bq_status(admin, r, contents):
    r.flushdb()
    for key, content in contents.items():
        write(r, key, content)
    for method, path, data in requests():
        response = getattr(admin, method)(path, data) if data else getattr(admin, method)(path)
        assert response.status_code < 500, (method, path, data, response.status_code)
        if path.endswith(".json") and response.status_code == 200:
            json.loads(response.content, parse_constant=no_constants)
    for arguments in ((), ("--json",)):
        out, err = io.StringIO(), io.StringIO()
        call_command("bq_status", *arguments, stdout=out, stderr=err)
        if arguments:
            json.loads(out.getvalue(), parse_constant=no_constants)
        assert "\x1b" not in out.getvalue() + err.getvalue()
