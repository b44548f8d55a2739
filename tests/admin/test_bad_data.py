"""Data no engine of ours wrote (written here with plain redis-py, as a foreign producer with a
bug would): every page shows what it can, says what it could not read, and never answers
500 or hides the other queues."""

import io
import json
import re

import pytest
from django.core.management import call_command

from .helpers import as_json, body, enqueue_v1, fail_task, start_task, url

PAGES = [url(""), url("metrics.json"), url("metrics/"), url("listeners/")] + [
    url("", name="bad", state=state) for state in
    ("scheduled", "pending", "reserved", "started", "complete", "failed")]


def strict_json(response):
    """The body as JSON, refusing Infinity and NaN (no JSON parser but Python's takes them)."""
    def refuse(constant):
        raise ValueError(f"{constant} is not JSON")
    return json.loads(response.content, parse_constant=refuse)


def healthy_neighbour(blueque):
    """A queue with ordinary data that every page must go on showing."""
    fail_task(blueque, "good")
    start_task(blueque, "good", listener="good-host_77")


def assert_every_page_answers(admin, also=()):
    for path in [*PAGES, *also]:
        response = admin.get(path)
        assert response.status_code == 200, (path, response.status_code)
        if path.endswith(".json"):
            strict_json(response)


WRONG_TYPES = {
    "listeners set": "blueque_listeners_bad",
    "listener leases zset": "blueque_listener_leases_bad",
    "pending list": "blueque_pending_tasks_bad",
    "failed list": "blueque_failed_tasks_bad",
    "complete list": "blueque_complete_tasks_bad",
    "started set": "blueque_started_tasks_bad",
    "scheduled zset": "blueque_scheduled_tasks_bad",
    "bulk job hash": "blueque_bulk_retry_failed_bad",
}


@pytest.mark.parametrize("what", sorted(WRONG_TYPES))
def test_a_key_of_the_wrong_type_is_reported_not_a_500(admin, blueque, r, what):
    healthy_neighbour(blueque)
    enqueue_v1(r, "bad", "{}", "bad-task")
    r.delete(WRONG_TYPES[what])
    r.set(WRONG_TYPES[what], "x")
    if what == "bulk job hash":  # the pages read a job's record once it is said to run
        r.sadd("blueque_bulk_running", "retry_failed_bad")
    assert_every_page_answers(admin, [url("tasks/bad-task/")])
    dashboard = admin.get(url(""))
    names = {queue.name for queue in dashboard.context["overview"].queues}
    assert {"good", "bad"} <= names
    good = next(queue for queue in dashboard.context["overview"].queues if queue.name == "good")
    assert good.counts["failed"] == 1 and good.counts["started"] == 1
    assert WRONG_TYPES[what] in body(dashboard)  # says what it could not read
    metrics = strict_json(admin.get(url("metrics.json")))
    assert WRONG_TYPES[what] in " ".join(metrics["unreadable"])


def test_a_wrong_type_for_the_queues_zset_still_shows_registered_queues(admin, blueque, r):
    r.set("blueque_queues", "x")
    r.hset("blueque_task_bad-task", mapping={"status": "pending", "queue": "bad"})
    r.lpush("blueque_pending_tasks_bad", "bad-task")
    assert_every_page_answers(admin)
    dashboard = admin.get(url(""))
    assert "demo.long" in {queue.name for queue in dashboard.context["overview"].queues}
    assert "blueque_queues" in body(dashboard)


def test_a_task_key_of_the_wrong_type_in_a_list(admin, blueque, r):
    healthy_neighbour(blueque)
    enqueue_v1(r, "bad", "{}", "fine-task")
    r.set("blueque_task_string-task", "x")
    r.lpush("blueque_pending_tasks_bad", "string-task")
    r.lpush("blueque_failed_tasks_bad", "string-task")
    r.sadd("blueque_started_tasks_bad", "good-host_77 1234 string-task")
    assert_every_page_answers(admin, [url("tasks/string-task/"), url("tasks/fine-task/")])
    page = admin.get(url("", name="bad", state="pending"))
    assert [task.id for task in page.context["tasks"]] == ["string-task", "fine-task"]
    assert "blueque_task_string-task" in body(admin.get(url("tasks/string-task/")))


def test_a_listener_info_of_the_wrong_type(admin, blueque, r):
    healthy_neighbour(blueque)
    r.delete("blueque_listener_good-host_77")
    r.set("blueque_listener_good-host_77", "x")
    enqueue_v1(r, "bad", "{}", "bad-task")
    assert_every_page_answers(admin)
    assert "good-host_77" in body(admin.get(url("listeners/")))


@pytest.mark.parametrize("created", ["inf", "-inf", "nan", "1e400", "not a time"])
def test_unreadable_times_on_a_task(admin, blueque, r, created):
    enqueue_v1(r, "bad", "{}", "t1")
    r.hset("blueque_task_t1", mapping={"created": created, "updated": created,
                                       "finished": created, "eta": created})
    assert_every_page_answers(admin, [url("tasks/t1/"), url("tasks/t1/progress/")])
    strict_json(admin.get(url("tasks/t1/progress/")))


ABSURD_ETAS = {"inf": "inf", "1e300": "1e+300", "nan": "nan", "year 10000": "253402300800.0",
               "not a number": "soon"}


@pytest.mark.parametrize("given", ABSURD_ETAS.values(), ids=ABSURD_ETAS.keys())
def test_an_absurd_eta_from_a_foreign_producer_shows_as_invalid(admin, blueque, r, given):
    """Issue 38: ``schedule()`` refuses such an ETA, a foreign producer may still write it
    (hash and scheduled set, as blueque 1.0 schedules): the scheduled list and the task's page
    say "invalid" where the due time goes, not a 500, the raw number, nor a date "in
    11574074074... d"."""
    r.hset("blueque_task_t1", mapping={"status": "scheduled", "queue": "bad", "eta": given,
                                       "parameters": "{}", "created": "1700000000.0"})
    score = float("inf") if given in ("nan", "soon") else float(given)  # no NaN score in Redis
    r.zadd("blueque_scheduled_tasks_bad", {"t1": score})
    r.zincrby("blueque_queues", 0, "bad")
    page = admin.get(url("", name="bad", state="scheduled"))
    assert page.status_code == 200
    cell = re.search(r'<td title="([^"]*)">([^<]*)</td>\s*<td class="num">', body(page))
    assert cell and cell.groups() == ("", "invalid"), cell and cell.groups()
    task = admin.get(url("tasks/t1/"))
    assert task.status_code == 200
    row = re.search(r"<code>eta</code></th><td>(.*?)</td></tr>", body(task), re.S)
    assert row and 'class="quiet">invalid</span>' in row.group(1), row and row.group(1)
    assert "due (eta)" not in body(task)  # no absurd point on the timeline
    progress = strict_json(admin.get(url("tasks/t1/progress/")))
    assert "1e+300" not in json.dumps(progress) and "253402300800" not in json.dumps(progress)


def test_a_lease_score_of_minus_infinity(admin, blueque, r):
    healthy_neighbour(blueque)
    r.sadd("blueque_listeners_bad", "ghost_1")
    r.zadd("blueque_listener_leases_bad", {"ghost_1": float("-inf")})
    r.zadd("blueque_listener_leases_good", {"good-host_77": float("inf")})
    r.zadd("blueque_queues", {"bad": 1})
    assert_every_page_answers(admin)
    listeners = strict_json(admin.get(url("metrics.json")))["listeners"]
    ghost = next(listener for listener in listeners if listener["id"] == "ghost_1")
    assert ghost["state"] == "stale" and ghost["heartbeat_age"] is None
    values = [line.rsplit(" ", 1)[1] for line in body(admin.get(url("metrics/"))).splitlines()
              if not line.startswith("#")]  # a histogram's le="+Inf" label is no value
    assert values and not {"NaN", "+Inf", "-Inf", "nan", "inf", "-inf"} & set(values)


def test_parameters_nested_too_deep_to_decode(admin, blueque, r):
    deep = "[" * 200_000 + "]" * 200_000
    enqueue_v1(r, "bad", deep, "deep")
    assert_every_page_answers(admin, [url("tasks/deep/")])
    page = body(admin.get(url("tasks/deep/")))
    assert "[[[[" in page


def test_a_task_id_with_a_slash_is_found_and_shown(admin, blueque, r):
    enqueue_v1(r, "bad", '{"n": 1}', "a/b")
    response = admin.get(url("find/", id="a/b"))
    assert response.status_code == 200
    assert "a/b" in body(response) and "&quot;n&quot;" in body(response)
    listing = admin.get(url("", name="bad", state="pending"))
    assert "find/?id=a%2Fb" in body(listing)


def test_a_task_page_costs_what_it_shows(admin, blueque, r):
    enqueue_v1(r, "bad", '{"n": 1}', "wide")
    with r.pipeline(transaction=False) as pipe:
        for start in range(0, 100_000, 10_000):
            pipe.hset("blueque_task_wide",
                      mapping={f"extra_{n:06d}": "v" * 20 for n in range(start, start + 10_000)})
        pipe.execute()
    r.hset("blueque_task_wide", mapping={"node": "n" * 10_000_000, "error": "e" * 3_000_000})
    response = admin.get(url("tasks/wide/"))
    assert response.status_code == 200
    assert len(response.content) < 1_500_000
    page = body(response)
    assert "extra_" in page and "more fields not shown" in page
    assert "(cut: 10000000 bytes in all)" in page  # the node
    assert "the field holds 3000000 bytes" in page  # the error
    assert "&quot;n&quot;" in page  # the protocol fields still come first


def test_bq_status_escapes_terminal_sequences_in_names(blueque, r):
    enqueue_v1(r, "evil\x1b[2J\x1b]0;owned\x07", "{}", "evil-task")
    out = io.StringIO()
    call_command("bq_status", stdout=out)
    printed = out.getvalue()
    assert "\x1b" not in printed and "\x07" not in printed
    assert "evil\\x1b[2J" in printed


def test_bq_status_reports_keys_of_the_wrong_type_and_goes_on(blueque, r):
    healthy_neighbour(blueque)
    enqueue_v1(r, "bad", "{}", "bad-task")
    for key in WRONG_TYPES.values():
        r.delete(key)
        r.set(key, "x")
    out, err = io.StringIO(), io.StringIO()
    call_command("bq_status", stdout=out, stderr=err)
    assert any(line.startswith("good ") for line in out.getvalue().splitlines())
    assert "blueque_listeners_bad" in err.getvalue()


def test_metrics_json_is_strict_json_with_heartbeats_of_every_kind(admin, blueque, r):
    healthy_neighbour(blueque)
    data = strict_json(admin.get(url("metrics.json")))
    assert as_json(admin.get(url("metrics.json")))["queues"] == data["queues"]
