"""Every Python example of the docs runs (issue 18): each page's ``code-block:: python``
blocks are run in order in a new project (snippets.DocsProject) against the test's Redis and a
real ``bq_listen``, and the outcome the page describes is checked. A block runs here, in the
tutorial's own test, or is excused in the page with ``.. not-run: <reason>``; a new block that
is none of these fails test_every_python_block_runs_or_says_why_not. The doctests
(``.. doctest::``) run in test_build.py.

Where a page leaves a helper undefined (``import_batch``, ``handle``...), the scenario defines
it after the page's code; the test's only other liberty is named where it is taken."""

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
for n, kind in enumerate(["builtins.TimeoutError"] * 150 + ["builtins.ValueError"] * 5):
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
assert all((status == "pending") == (kinds[task_id] == "builtins.TimeoutError")
           for task_id, status in statuses.items()), statuses
print("retried", sum(status == "pending" for status in statuses.values()))
""")
    assert "155 failed, 150 timed out" in out and out.count("100 retried") == 1
    assert "50 retried" in out and "retried 150" in out


@pytest.mark.parametrize("page", sorted(SCENARIOS))
def test_the_python_blocks_of_the_page_run(page, project):
    blocks = Blocks(page)
    SCENARIOS[page](project, blocks)
    assert not blocks.unused(), f"blocks left unrun: {blocks.unused()}"

