"""The failed list filtered by error type (issue 14): its choices, its pages, and a cost that
follows the page, not the failed list (it reads the per-type index, never the list)."""

from .helpers import body, url
from .test_scale import commands


def fail_many(client, count, error_type, prefix):
    """``count`` tasks failed with ``error_type`` the way a listener records it."""
    proto, queue = client.protocol, client.get_queue("q")
    ids = []
    for n in range(count):
        task_id = queue.enqueue(f"{prefix}{n}")
        proto.reserve("q", "node-1_4242", "tok")
        proto.start("q", task_id, "node-1_4242", 4343, "tok")
        proto.finish("q", task_id, listener_id="node-1_4242", pid=4343, token="tok",
                     outcome="failed", value=f"{prefix} broke", error_type=error_type,
                     retryable=False)
        ids.append(task_id)
    return ids


def test_the_failed_list_filters_by_error_type_newest_first(admin, blueque):
    values = fail_many(blueque, 30, "builtins.ValueError", "v")
    keys = fail_many(blueque, 12, "builtins.KeyError", "k")
    page = admin.get(url("", name="q", state="failed"))
    assert page.context["error_types"] == [("builtins.KeyError", 12),
                                           ("builtins.ValueError", 30)]
    text = body(page)
    assert 'id="error-type-filter"' in text and "error_type=builtins.KeyError" in text
    filtered = admin.get(url("", name="q", state="failed", error_type="builtins.KeyError",
                             per_page=25))
    assert filtered.status_code == 200
    assert filtered.context["total"] == 12
    assert [task.id for task in filtered.context["tasks"]] == keys[::-1]
    second = admin.get(url("", name="q", state="failed",
                           error_type="builtins.ValueError", per_page=25, p=2))
    assert [task.id for task in second.context["tasks"]] == values[::-1][25:]
    assert "error_type=builtins.ValueError" in str(second.context["page_links"])


def test_the_bulk_buttons_are_not_offered_on_a_filtered_list(admin, blueque):
    """A bulk job acts on the whole failed list: offered on a list filtered by error type, its
    button said "Retry all 12" and the job retried all 42 (or deleted them)."""
    fail_many(blueque, 30, "builtins.ValueError", "v")
    fail_many(blueque, 12, "builtins.KeyError", "k")
    whole = body(admin.get(url("", name="q", state="failed")))
    assert "Retry all 42 failed tasks…" in whole and "Delete all 42 failed tasks…" in whole
    filtered = body(admin.get(url("", name="q", state="failed", error_type="builtins.KeyError")))
    assert 'class="blueque-bulk"' in whole and 'class="blueque-bulk"' not in filtered
    assert "failed tasks…" not in filtered and 'id="bulk-whole-list"' in filtered


def test_a_task_retried_since_is_no_longer_in_its_types_list(admin, blueque):
    first, second = fail_many(blueque, 2, "builtins.KeyError", "k")
    assert blueque.protocol.admin.retry("q", first) == 1
    page = admin.get(url("", name="q", state="failed", error_type="builtins.KeyError"))
    assert [task.id for task in page.context["tasks"]] == [second]


def test_the_filtered_page_costs_what_the_page_shows(admin, blueque, r):
    fail_many(blueque, 5, "builtins.KeyError", "k")
    fail_many(blueque, 100, "builtins.ValueError", "v")
    path = url("", name="q", state="failed", error_type="builtins.KeyError")
    admin.get(path)  # scripts loaded
    small = commands(admin, r, path)
    fail_many(blueque, 2000, "builtins.ValueError", "more")
    large = commands(admin, r, path)
    assert small == large
    assert "lrange" not in large and large["hmget"] == 5
    assert sum(large.values()) < 40, large


def test_a_bad_filter_is_a_404_not_a_500(admin, blueque):
    fail_many(blueque, 1, "builtins.KeyError", "k")
    assert admin.get(url("", name="q", state="pending",
                         error_type="builtins.KeyError")).status_code == 404
    assert admin.get(url("", name="q", state="failed",
                         error_type="x" * 600)).status_code == 404
    unknown = admin.get(url("", name="q", state="failed", error_type="no.Such"))
    assert unknown.status_code == 200 and unknown.context["tasks"] == []


def test_the_dashboard_shows_the_most_frequent_errors_of_the_last_hour(admin, blueque, r):
    fail_many(blueque, 2, "builtins.KeyError", "k")
    fail_many(blueque, 3, "builtins.ValueError", "v")
    fail_many(blueque, 1, "builtins.OSError", "o")
    proto = blueque.protocol
    retried = blueque.get_queue("q").enqueue("r", retries=1)
    proto.reserve("q", "node-1_4242", "tok")
    proto.start("q", retried, "node-1_4242", 4343, "tok")
    assert proto.finish("q", retried, listener_id="node-1_4242", pid=4343, token="tok",
                        outcome="failed", value="once", error_type="builtins.OSError") == "retry"
    fail_many(blueque, 1, "builtins.TypeError", "t")
    page = admin.get(url(""))
    queue, = [queue for queue in page.context["overview"].queues if queue.name == "q"]
    # a retried run counts: OSError has 2 runs, as many as KeyError; TypeError is fourth
    assert queue.frequent_errors[0] == ("builtins.ValueError", 3)
    assert sorted(queue.frequent_errors[1:]) == [("builtins.KeyError", 2),
                                                ("builtins.OSError", 2)]
    assert "error_type=builtins.ValueError" in body(page)
    figures = admin.get(url("metrics.json")).json()
    q, = [queue for queue in figures["queues"] if queue["name"] == "q"]
    assert q["frequent_errors"]["builtins.ValueError"] == 3
