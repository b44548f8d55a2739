"""Every Python example of the docs runs (issue 18): each page's ``code-block:: python``
blocks are run in order in a new project (snippets.DocsProject) against the test's Redis and a
real ``bq_listen``, and the outcome the page describes is checked. A block runs here, in the
tutorial's own test, or is excused in the page with ``.. not-run: <reason>``; a new block that
is none of these fails test_every_python_block_runs_or_says_why_not. The doctests
(``.. doctest::``) run in test_build.py.

Where a page leaves a helper undefined (``import_batch``, ``handle``...), the scenario defines
it after the page's code; the test's only other liberty is named where it is taken."""

import json
import sys

import django
import pytest

from tests.docs.snippets import (
    Blocks,
    DocsProject,
    doctest_definitions,
    pages_with_python,
    python_blocks,
    split_definitions,
)

RUN_ELSEWHERE = {"tutorial/getting-started.rst": "tests/docs/test_getting_started.py"}
SCENARIOS = {}


def scenario(page):
    def register(function):
        SCENARIOS[page] = function
        return function
    return register


@pytest.fixture
def project(tmp_path, redis_url):
    made = DocsProject(tmp_path, redis_url)
    yield made
    made.stop()


def test_every_python_block_runs_or_says_why_not():
    pages = pages_with_python()
    assert len(pages) >= 8, pages
    for page in pages:
        blocks = python_blocks(page)
        assert all(block.excuse != "" for block in blocks), f"{page}: not-run needs a reason"
        if any(block.excuse is None for block in blocks):
            assert page in SCENARIOS or page in RUN_ELSEWHERE, f"{page}: no test runs it"
    assert set(SCENARIOS) <= set(pages), set(SCENARIOS) - set(pages)


@scenario("reference/api.rst")
def public_api(project, blocks):
    project.shell(blocks.take() + """
assert issubclass(StopRequested, BaseException) and not issubclass(StopRequested, Exception)
assert all(map(callable, (blueque_task, cancel, current_task, get_result)))
assert issubclass(TaskTimeout, Exception)
""")
    # the unique-key example, with the page's add() as a task of the project, not eager
    project.set_tasks("""
from django_blueque import blueque_task

@blueque_task
def add(a, b=1):
    return a + b
""")
    project.shell("import datetime\nfrom yourapp.tasks import add\n" + blocks.take() + """
from django_blueque import get_result
from django_blueque.conf import get_client
assert get_result(first).status == "scheduled"
assert len(get_client().redis.keys("blueque_task_*")) == 1
""")


@scenario("howto/progress.rst")
def progress(project, blocks):
    # the task the page's doctest defines, run by a listener this time
    project.set_tasks(doctest_definitions("howto/progress.rst", "progress"))
    task_id = project.shell("print(yearly_report.enqueue(2025))").split()[-1]
    project.burst()
    project.shell(f"task_id = {task_id!r}\n{blocks.take()}" + """
assert (result.status, result.progress, result.progress_message) == \\
    ("complete", 100, "west done"), vars(result.task)
assert result.result == {"year": 2025, "regions": 4}
""")


@scenario("howto/workflows.rst")
def workflows(project, blocks):
    project.set_tasks(blocks.take())
    out = project.shell(blocks.take() + """
from django_blueque import get_result
assert [get_result(i).status for i in workflow.task_ids] == ["pending"] + ["waiting"] * 4
print("workflow", workflow, publish_id)
""")
    workflow_id, publish_id = out.split()[-2:]
    project.burst()
    project.shell(f"workflow_id, publish_id = {workflow_id!r}, {publish_id!r}" + """
from django_blueque import get_result, workflow_task_ids
assert len(workflow_task_ids(workflow_id)) == 5
assert get_result(publish_id).result == [
    "/tmp/cat.mov.mp4", "/tmp/cat.mov.ogv", "/tmp/cat.mov.webm"], get_result(publish_id).status
""")
    project.shell(blocks.take())


@scenario("howto/cancelling.rst")
def cancelling(project, blocks):
    project.set_tasks(blocks.take() + """
import time
from django_blueque.conf import get_client

def import_batch(batch_id):
    time.sleep(0.05)
    get_client().redis.rpush("docs:done", batch_id)
""")
    project.listen()
    project.shell("""
import time
from django_blueque import cancel, get_result
from django_blueque.conf import get_client

task_id = import_rows.enqueue(list(range(400)))
deadline = time.monotonic() + 30
while not get_client().redis.llen("docs:done"):
    assert time.monotonic() < deadline, "the task did not start"
    time.sleep(0.05)
assert cancel(task_id) == "requested"
result = get_result(task_id).wait(timeout=30)
assert (result.status, result.error) == ("failed", "cancelled"), result.status
assert 0 < get_client().redis.llen("docs:done") < 400
""")


@scenario("howto/retries-timeouts.rst")
def retries_and_timeouts(project, blocks):
    project.set_tasks(blocks.take() + """
def flaky():
    raise RuntimeError("try again")
flaky = blueque_task(flaky, queue="docs.flaky")  # no retries of its own: the settings' one
""")
    project.add_settings(blocks.take())
    # the test's liberty: a one-second timeout, not the page's hour
    timeout_block = blocks.take()
    assert "timeout=3600" in timeout_block
    project.add_tasks(timeout_block.replace("timeout=3600", "timeout=1") + """
import time
from django_blueque.conf import get_client

class Scratch:
    def remove(self):
        get_client().redis.set("docs:removed", 1)

def open_scratch_space():
    return Scratch()

def load(path, tmp):
    time.sleep(60)
""")
    ids = project.shell("print(encode.enqueue(1), flaky.enqueue(), import_file.enqueue('x'))")
    encode_id, flaky_id, import_id = ids.split()
    project.burst()
    project.shell(f"""
from django_blueque import get_result
from django_blueque.conf import get_client, get_settings
encode = get_result({encode_id!r})
assert encode.status == "complete"
assert (encode.retries, encode.backoff, encode.timeout, encode.retention) == \\
    (3, 30, 7200, 86400), encode.fields                     # the decorator wins
assert get_settings().policy("video.encode")["timeout"] == 4 * 3600
flaky = get_result({flaky_id!r})
assert (flaky.status, flaky.retries, flaky.attempts) == ("scheduled", 1, 1), flaky.fields
assert flaky.last_error == "try again", flaky.fields         # retried after its backoff
assert abs(flaky.eta - flaky.updated - flaky.backoff) < 2, flaky.fields
timed_out = get_result({import_id!r})
assert timed_out.status == "scheduled", timed_out.fields    # a timeout is a failure: retried
assert timed_out.last_error == "timed out after 1 s", timed_out.fields
assert int(get_client().redis.get("docs:removed")) == 1    # the finally block ran
""")


@scenario("howto/periodic.rst")
def periodic(project, blocks):
    project.add_settings('TIME_ZONE = "Europe/Paris"')
    project.set_tasks(blocks.take() + """
@blueque_task(queue="reminders")
def send_reminder(user_id): ...
""")
    project.run(sys.executable, "manage.py", "bq_schedule", "--once")
    project.shell(blocks.take() + """
import datetime, time, zoneinfo
from django_blueque import get_result
from django_blueque.services import enqueue_periodic, next_periodic_runs

reminder = get_result(task_id)
assert reminder.status == "scheduled" and abs(reminder.eta - time.time() - 86400) < 60
runs = {task.queue: at for task, at in next_periodic_runs()}
hourly, nightly = runs[hourly_cleanup.queue], runs[nightly_report.queue]
assert hourly % 3600 == 0 and 0 < hourly - time.time() <= 3600
paris = datetime.datetime.fromtimestamp(nightly, zoneinfo.ZoneInfo("Europe/Paris"))
assert (paris.hour, paris.minute) == (3, 0) and 0 < nightly - time.time() <= 86400
# two schedulers at a time both tasks are due: each run is enqueued once
assert len(enqueue_periodic(at=max(hourly, nightly) + 1)) == 2
assert enqueue_periodic(at=max(hourly, nightly) + 2) == []
""")


@scenario("howto/from-blueque1.rst")
def from_blueque1(project, blocks):
    imports = blocks.take()
    project.set_tasks(blocks.take().split("\n", 1)[1] + """
def handle(parameters):
    return parameters.upper()
""")
    task_id = project.shell(imports + f"""
client = Client({project.redis_url!r})
print(client.get_queue("feeds.import").enqueue("https://example.com/feed.xml"))
assert callable(ForkingRunner)
""").split()[-1]
    project.burst()
    project.shell(f"""
from django_blueque import get_result
result = get_result({task_id!r})
assert (result.status, result.result) == ("complete", "HTTPS://EXAMPLE.COM/FEED.XML"), result.fields
""")


@scenario("reference/admin.rst")
def admin_urls(project, blocks):
    assert project.write_file_block(blocks.take())
    project.run(sys.executable, "manage.py", "migrate", "-v0")
    assert "no issues" in project.run(sys.executable, "manage.py", "check")
    project.shell("""
from django.contrib.auth.models import User
from django.test import Client
from django.test.utils import setup_test_environment
setup_test_environment()
User.objects.create_superuser("root", "root@example.com", "pw")
client = Client()
client.login(username="root", password="pw")
page = client.get("/admin/blueque/")
assert page.status_code == 200
assert 'href="/admin/blueque/listeners/"' in page.content.decode()  # links to that path
""")


@scenario("reference/settings.rst")
def reporter_filter(project, blocks):
    project.add_settings(blocks.take())
    project.shell("""
from django.conf import settings
from django.views.debug import get_default_exception_reporter_filter
settings.BLUEQUE = {"URL": "redis://:hunter2@redis.example:6379/0"}
shown = get_default_exception_reporter_filter().get_safe_settings()["BLUEQUE"]
assert shown == {"URL": "redis://:***@redis.example:6379/0"}, shown
""")


@scenario("reference/tasks-backend.rst")
def tasks_backend(project, blocks):
    code = blocks.take()
    if django.VERSION < (6,):  # the test's liberty: what the page's comment says for 5.2
        code = code.replace("from django.tasks import task ", "from django_tasks import task ")
    definitions, statements = split_definitions(code)
    project.set_tasks(definitions)
    project.add_settings(blocks.take())
    project.listen()
    project.shell(statements + """
import time
from django_blueque import get_result
deadline = time.monotonic() + 30
while result.status != "SUCCESSFUL":
    assert result.status in ("READY", "RUNNING") and time.monotonic() < deadline, result.status
    time.sleep(0.05)
    result.refresh()
assert result.return_value is None and result.errors == []
blueque = get_result(result.id)
assert blueque.queue == "django.tasks.emails", blueque.fields
""")


# after the scenarios: the parameters are read when the module is
@scenario("reference/json-api.rst")
def task_api(project, blocks):
    project.add_settings(blocks.take())  # the token, naming the user "reports-bot"
    project.run(sys.executable, "manage.py", "migrate", "-v0")
    # the test's liberty: the script calls a server of its own on a free port, not :8000
    script = blocks.take().replace("http://localhost:8000", "http://127.0.0.1:{port}")
    assert "{port}" in script
    out = project.shell("""
import threading
from wsgiref.simple_server import WSGIRequestHandler, make_server
from django.contrib.auth.models import User
from django.core.wsgi import get_wsgi_application
from django_blueque.conf import get_client

User.objects.create_superuser("reports-bot", "bot@example.com", "pw")
proto, queue = get_client().protocol, get_client().get_queue("video.encode")
kinds = {}
for n, kind in enumerate(["Timeout"] * 150 + ["builtins.ValueError"] * 5):
    task_id = queue.enqueue(str(n))
    proto.reserve("video.encode", "host_1", "tok")
    proto.start("video.encode", task_id, "host_1", 1, "tok")
    proto.finish("video.encode", task_id, listener_id="host_1", pid=1, token="tok",
                 outcome="failed", value="slow", error_type=kind, retryable=False)
    kinds[task_id] = kind

class Quiet(WSGIRequestHandler):
    def log_message(self, *args):
        pass

server = make_server("127.0.0.1", 0, get_wsgi_application(), handler_class=Quiet)
threading.Thread(target=server.serve_forever, daemon=True).start()
""" + script.replace("{port}", "{server.server_port}").replace(
        'BASE = "', 'BASE = f"') + """
statuses = {task_id: get_client().get_task(task_id).status for task_id in kinds}
assert all((status == "pending") == (kinds[task_id] == "Timeout")
           for task_id, status in statuses.items()), statuses
print("retried", sum(status == "pending" for status in statuses.values()))
""")
    assert "155 failed, 150 timed out" in out and out.count("100 retried") == 1
    assert "50 retried" in out and "retried 150" in out


@scenario("howto/observability.rst")
def observability(project, blocks):
    project.add_settings(blocks.take())  # the tracer provider (spans printed on stdout)
    project.add_settings(blocks.take())  # LOGGING: JSON lines on stdout
    project.set_tasks(blocks.take())
    before = json_objects(project.shell("""
import json
from opentelemetry import trace
with trace.get_tracer("docs").start_as_current_span("GET /videos/42/encode/"):
    print(json.dumps(encode_video.enqueue(42)))
"""))
    task_id = before[0]
    request, = [o for o in before if isinstance(o, dict) and o.get("name", "").startswith("GET")]
    enqueue, = [o for o in before
                if isinstance(o, dict) and o.get("name") == "publish video.encode"]
    after = json_objects(project.burst())
    run, = [o for o in after if o.get("name") == "yourapp.tasks.encode_video"]
    assert enqueue["parent_id"] == request["context"]["span_id"]
    assert run["parent_id"] == enqueue["context"]["span_id"]
    assert run["context"]["trace_id"] == request["context"]["trace_id"]
    assert run["attributes"]["blueque.outcome"] == "complete"
    line, = [o for o in after if o.get("message") == "encoding video 42"]
    assert (line["task_id"], line["queue"], line["attempt"]) == (task_id, "video.encode", 1)
    assert line["logger"] == "yourapp.tasks"


LIMITED_WORK = """
from django_blueque.conf import get_client

def _work(name, gated):
    # logs its start and end; a gated run waits until the test lets it end
    r = get_client().redis
    r.rpush("docs:events", f"start {name}")
    if gated:
        r.blpop(f"docs:gate:{name}", timeout=60)
    r.rpush("docs:events", f"end {name}")

def render_on_gpu(scene_id):
    _work(f"scene-{scene_id}", gated=True)

def load_rows(customer_id, path):
    _work(path, gated=customer_id == 7)

def send_mail_to(user_id):
    _work(f"user-{user_id}", gated=False)
"""

WAITING = """
import time
from django_blueque import get_result
from django_blueque.conf import get_client
r = get_client().redis

def events():
    return r.lrange("docs:events", 0, -1)

def wait(predicate, what):
    deadline = time.monotonic() + 30
    while not predicate():
        assert time.monotonic() < deadline, (what, events())
        time.sleep(0.05)

def release(name):
    r.rpush(f"docs:gate:{name}", 1)
"""


@scenario("howto/concurrency-and-rate-limits.rst")
def concurrency_and_rate_limits(project, blocks):
    # the test's liberty: a rate of 3 starts in any 2 s, not the page's 30 a minute
    settings = blocks.take()
    assert '"RATE_LIMIT": "30/m"' in settings
    project.add_settings(settings.replace('"30/m"', '"3/2s"'))
    project.set_tasks(blocks.take() + LIMITED_WORK)
    project.listen("--concurrency", "4")  # a slot free beyond each limit below
    # MAX_RUNNING 2: the third render waits (its take refused) until a render ends
    project.shell(WAITING + """
ids = [render.enqueue(n) for n in range(3)]
wait(lambda: events() == ["start scene-0", "start scene-1"], "two renders start")
wait(lambda: r.exists("blueque_full_gpu.render"), "a take finds the queue full")
assert get_result(ids[2]).status == "pending" and len(events()) == 2
release("scene-0")
wait(lambda: "start scene-2" in events(), "the third starts once a slot frees")
assert events().index("start scene-2") > events().index("end scene-0")
release("scene-1")
release("scene-2")
wait(lambda: all(get_result(i).status == "complete" for i in ids), "the renders end")
""")
    # MAX_RUNNING_PER_KEY 1: customer 7's second import is held, customer 8's goes past it
    enqueue = blocks.take()
    uploads = "".join(f"customer_id, path = {customer!r}, {path!r}\n{enqueue}"
                      for customer, path in ((7, "a.csv"), (7, "b.csv"), (8, "c.csv")))
    project.shell(WAITING + 'r.delete("docs:events")\n' + uploads + """
wait(lambda: {"start a.csv", "end c.csv"} <= set(events()), "customer 8 goes past")
held, = r.zrange("blueque_held_imports", 0, -1)
key, _since, held_id = held.split()
assert key == "customer-7" and "start b.csv" not in events()
result = get_result(held_id)
assert result.status == "pending" and "held_since" in result.fields, result.fields
release("a.csv")
wait(lambda: "start b.csv" in events(), "customer 7's next import starts")
assert events().index("start b.csv") > events().index("end a.csv")
release("b.csv")
wait(lambda: events().count("end b.csv") == 1, "the imports end")
""")
    # RATE_LIMIT 3/2s: the fourth start of five is 2 s after the first, at the earliest
    project.shell(WAITING + """
ids = [send_newsletter.enqueue(n) for n in range(5)]
wait(lambda: all(get_result(i).status == "complete" for i in ids), "the mails are sent")
starts = sorted(get_client().get_task(i).started for i in ids)
assert starts[3] - starts[0] >= 2 - 0.05 and starts[4] - starts[1] >= 2 - 0.05, starts
""")


def json_objects(text):
    """The JSON values printed one after the other in ``text`` (spans span several lines)."""
    decoder, found, at = json.JSONDecoder(), [], 0
    while at < len(text):
        if text[at].isspace():
            at += 1
            continue
        value, at = decoder.raw_decode(text, at)
        found.append(value)
    return found


@pytest.mark.parametrize("page", sorted(SCENARIOS))
def test_the_python_blocks_of_the_page_run(page, project):
    blocks = Blocks(page)
    SCENARIOS[page](project, blocks)
    assert not blocks.unused(), f"blocks left unrun: {blocks.unused()}"

