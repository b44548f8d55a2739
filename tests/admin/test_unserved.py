"""A queue with pending tasks and no live listener (none started, or its task defined in a
module that is never imported, jobs.py) is flagged on the dashboard and by bq_status, with the
fix (issue 42, item 9)."""

import io
import json
import re

from django.core.management import call_command

from .helpers import body, url


def unserved_rows(page):
    return re.findall(r'<tr data-queue="([^"]+)" class="blueque-unserved">', page)


def test_pending_tasks_without_a_live_listener_are_flagged_with_the_fix(admin, blueque):
    blueque.get_queue("jobs.encode").enqueue('{"n": 1}')  # its task lives in jobs.py
    blueque.get_queue("demo.long").enqueue('{"steps": 1}')  # registered, no listener started
    blueque.get_queue("served").enqueue('{"n": 1}')
    blueque.protocol.heartbeat("node-1_42", ["served"], {"host": "node-1", "pid": 42})
    page = body(admin.get(url("")))
    assert unserved_rows(page) == ["demo.long", "jobs.encode"]
    notice = re.search(r'<div [^>]*id="blueque-unserved".*?</div>', page, flags=re.S)[0]
    assert "2 queues have pending tasks and no live listener" in notice
    demo, jobs = re.findall(r"<li>(.*?)</li>", notice, flags=re.S)
    assert "demo.long" in demo and "start <code>manage.py bq_listen</code>" in demo
    assert "jobs.encode" in jobs and "a module named <code>tasks.py</code>" in jobs


def test_a_queue_with_a_live_listener_or_nothing_pending_is_not_flagged(admin, blueque):
    blueque.get_queue("served").enqueue('{"n": 1}')
    blueque.protocol.heartbeat("node-1_42", ["served"], {"host": "node-1", "pid": 42})
    page = body(admin.get(url("")))
    assert unserved_rows(page) == []
    assert 'id="blueque-unserved"' not in page


def test_bq_status_flags_them_too(blueque):
    blueque.get_queue("jobs.encode").enqueue('{"n": 1}')
    blueque.get_queue("jobs.encode").enqueue('{"n": 2}')
    out = io.StringIO()
    call_command("bq_status", stdout=out)
    assert ("warning: jobs.encode has 2 pending task(s) and no live listener: no task is "
            "registered for it here: define it in an installed app's tasks.py") in out.getvalue()
    assert "warning: demo.long" not in out.getvalue()
    out = io.StringIO()
    call_command("bq_status", "--json", stdout=out)
    flags = {queue["name"]: queue["unserved"] for queue in json.loads(out.getvalue())["queues"]}
    assert flags["jobs.encode"] is True and flags["demo.long"] is False
