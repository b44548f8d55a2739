"""django-rq's dashboard on the same data as bench/admin_bench.py, for comparison: 1,000,000
failed jobs in one queue; its dashboard, a 100-row failed list, a job page, and "delete all
failed" over 10,000 jobs. Run it with django-rq installed (not in this project's
dependencies), e.g. in a throwaway virtualenv:

    python -m venv bench/.venvs/django_rq
    bench/.venvs/django_rq/bin/pip install django-rq "Django>=5.2,<6"
    bench/.venvs/django_rq/bin/python bench/admin_bench_rq.py [--tasks N] [--runs N] [--bulk N]

The jobs are copies of one job that really failed in an rq worker, written by a Lua script.
"""

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from admin_bench import summary, timed  # noqa: E402

from devtools.servers import RedisServer  # noqa: E402

CLONE = """
-- KEYS[1] failed registry; ARGV[1] first number, ARGV[2] count, ARGV[3] score, ARGV[4] id
-- prefix, then the template job's fields and values
local fields = {}
for i = 5, #ARGV do fields[#fields + 1] = ARGV[i] end
for n = tonumber(ARGV[1]), tonumber(ARGV[1]) + tonumber(ARGV[2]) - 1 do
  local id = string.format('%s%08x-b3c4-4d5e-8f60-%012d', ARGV[4], n, n)
  redis.call('HSET', 'rq:job:' .. id, unpack(fields))
  redis.call('ZADD', KEYS[1], ARGV[3], id)
end
"""


def urls_module(url):
    """The URLconf: django-rq mounted as its README says, beside the admin."""
    import types

    from django.contrib import admin
    from django.urls import include, path

    module = types.ModuleType("bench_rq_urls")
    module.urlpatterns = [path("django-rq/", include("django_rq.urls")),
                          path("admin/", admin.site.urls)]
    sys.modules["bench_rq_urls"] = module


def fill(url, queue_name, count, chunk=20000):
    """``count`` failed jobs in ``queue_name``: one real failure, then copies of it."""
    from redis import Redis
    from rq import Queue, SimpleWorker

    connection = Redis.from_url(url)
    queue = Queue(queue_name, connection=connection)
    job = queue.enqueue("json.loads", '{"video_id": 42, "preset": "1080p"')  # fails
    SimpleWorker([queue], connection=connection).work(burst=True)
    fields = connection.hgetall(f"rq:job:{job.id}")
    assert fields[b"status"] == b"failed", fields[b"status"]
    flat = [item for pair in fields.items() for item in pair]
    key = f"rq:failed:{queue_name}"
    score = connection.zscore(key, job.id)
    script = connection.register_script(CLONE)
    for first in range(0, count - 1, chunk):
        script(keys=[key], args=[first, min(chunk, count - 1 - first), score,
                                 queue_name[:2], *flat])
    return job.id


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--bulk", type=int, default=10_000)
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    server = RedisServer().start()
    workdir = tempfile.mkdtemp(prefix="blueque-rq-bench-")
    try:
        import django
        from django.conf import settings

        settings.configure(
            DEBUG=False, SECRET_KEY="bench", ALLOWED_HOSTS=["testserver"],
            ROOT_URLCONF="bench_rq_urls", USE_TZ=True,
            INSTALLED_APPS=["django.contrib.admin", "django.contrib.auth",
                            "django.contrib.contenttypes", "django.contrib.sessions",
                            "django.contrib.messages", "django.contrib.staticfiles",
                            "django_rq"],
            MIDDLEWARE=["django.contrib.sessions.middleware.SessionMiddleware",
                        "django.middleware.common.CommonMiddleware",
                        "django.middleware.csrf.CsrfViewMiddleware",
                        "django.contrib.auth.middleware.AuthenticationMiddleware",
                        "django.contrib.messages.middleware.MessageMiddleware"],
            TEMPLATES=[{"BACKEND": "django.template.backends.django.DjangoTemplates",
                        "APP_DIRS": True, "OPTIONS": {"context_processors": [
                            "django.template.context_processors.request",
                            "django.contrib.auth.context_processors.auth",
                            "django.contrib.messages.context_processors.messages"]}}],
            DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3",
                                   "NAME": os.path.join(workdir, "db.sqlite3")}},
            STATIC_URL="static/",
            RQ_QUEUES={"default": {"URL": server.url}, "bulk": {"URL": server.url}})
        django.setup()
        urls_module(server.url)
        import django_rq
        from django.contrib.auth.models import User
        from django.core.management import call_command
        from django.test import Client

        call_command("migrate", verbosity=0)
        began = time.perf_counter()
        real_job = fill(server.url, "default", args.tasks)
        print(f"filled {args.tasks} failed jobs in {time.perf_counter() - began:.1f} s",
              flush=True)
        from django_rq.settings import get_queues_map

        index = get_queues_map()  # django-rq numbers queues in its own order
        client = Client()
        client.force_login(User.objects.create_superuser("bench", "bench@example.com", "x"))
        listing = f"/django-rq/queues/{index['default']}/failed/"
        rows = client.get(listing).content.decode().count('name="_selected_action"')
        assert rows == min(100, args.tasks), f"django-rq's failed list shows {rows} rows"
        pages = {
            "dashboard": "/django-rq/",
            "failed list, page 1 (100 rows)": listing,
            "job page": f"/django-rq/queues/{index['default']}/{real_job}/",
        }
        figures = {"django_rq": django_rq.VERSION if hasattr(django_rq, "VERSION") else None,
                   "tasks": args.tasks, "pages": {}}
        for name, path in pages.items():
            figures["pages"][name] = summary(timed(client, path, args.runs))
            print(f"{name:45} {figures['pages'][name]}", flush=True)
        fill(server.url, "bulk", args.bulk)
        began = time.perf_counter()
        response = client.post(f"/django-rq/queues/{index['bulk']}/failed/clear/")
        assert response.status_code == 302, response.status_code
        seconds = time.perf_counter() - began
        figures["bulk_delete_all_failed"] = {"tasks": args.bulk,
                                             "seconds_to_complete": round(seconds, 3),
                                             "requests": 1,
                                             "longest_request_ms": round(seconds * 1000, 1)}
        print(f"{'delete all failed (one request)':45} {figures['bulk_delete_all_failed']}")
        if args.json:
            Path(args.json).write_text(json.dumps(figures, indent=2, default=str) + "\n")
    finally:
        server.close()


if __name__ == "__main__":
    main()
