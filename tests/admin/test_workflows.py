"""What the admin and the JSON API show of dependencies and workflows (issue 40), with
Django's test client: a task's page lists what it waits for and what waits for it, with their
states and links, and its workflow's progress; the dashboard counts waiting tasks per queue;
the API returns a workflow with its tasks."""

import re

from demo.tasks import download, encode, publish

from django_blueque import chain, group
from tests.admin.helpers import as_json, body, run, url


def video_pipeline():
    return chain(download.s("https://example.com/cat.mov"),
                 group(encode.s(fmt=f) for f in ("webm", "mp4")), publish.s()).enqueue()


def test_the_task_page_lists_dependencies_dependents_and_the_workflows_progress(admin, blueque):
    workflow = video_pipeline()
    fetch, webm, mp4, last = workflow.task_ids
    run(blueque, "demo.download", "complete", '{"path": "/tmp/cat.mov"}')
    page = body(admin.get(url(f"tasks/{last}/")))
    waits_for = re.search(r'<ul id="waits-for">(.*?)</ul>', page, re.S).group(1)
    assert [m for m in re.findall(r'tasks/([^/]+)/', waits_for)] == [webm, mp4]
    assert waits_for.count("status-pending") == 2
    assert f"Workflow {workflow}" in page
    assert "1 of 4 complete, 0 failed, 0 running" in page
    page = body(admin.get(url(f"tasks/{fetch}/")))
    waited_by = re.search(r'<ul id="waited-by">(.*?)</ul>', page, re.S).group(1)
    assert sorted(re.findall(r'tasks/([^/]+)/', waited_by)) == sorted([webm, mp4])
    assert waited_by.count("status-pending") == 2
    page = body(admin.get(url(f"tasks/{webm}/")))
    assert re.findall(r'tasks/([^/]+)/', re.search(
        r'<ul id="waits-for">(.*?)</ul>', page, re.S).group(1)) == [fetch]
    assert f"tasks/{last}/" in re.search(r'<ul id="waited-by">(.*?)</ul>', page, re.S).group(1)


def test_a_plain_task_page_has_no_dependencies_section(admin, blueque):
    task_id = blueque.get_queue("q").enqueue("x")
    assert 'id="dependencies"' not in body(admin.get(url(f"tasks/{task_id}/")))


def test_garbage_in_the_new_keys_still_shows_the_page(admin, blueque, r):
    workflow = video_pipeline()
    last = workflow.task_ids[-1]
    r.hset(f"blueque_task_{last}", "depends_on", "{garbage")
    r.set(f"blueque_dependents_{workflow.task_ids[0]}", "garbage")
    assert admin.get(url(f"tasks/{last}/")).status_code == 200
    assert admin.get(url(f"tasks/{workflow.task_ids[0]}/")).status_code == 200
    r.set(f"blueque_workflow_{workflow}", "[1, 2")
    assert admin.get(url(f"tasks/{last}/")).status_code == 200
    assert admin.get(url(f"api/workflows/{workflow}/")).status_code == 409


def test_the_dashboard_counts_waiting_tasks_per_queue(admin, blueque):
    video_pipeline()
    page = body(admin.get(url("")))
    counts = dict(re.findall(r'data-bq-waiting="([^"]+)">(\d+)<', page))
    assert counts["demo.encode"] == "2" and counts["demo.publish"] == "1"
    assert counts["demo.download"] == "0"
    metrics = {queue["name"]: queue for queue in as_json(admin.get(url("metrics.json")))["queues"]}
    assert metrics["demo.encode"]["waiting"] == 2
    prometheus = admin.get(url("metrics/")).content.decode()
    assert 'blueque_waiting_tasks{queue="demo.encode"} 2' in prometheus
    assert 'blueque_waiting_tasks{queue="demo.download"} 0' in prometheus


def test_the_api_returns_a_workflow_with_its_tasks(admin, blueque):
    workflow = video_pipeline()
    fetch, webm, mp4, last = workflow.task_ids
    run(blueque, "demo.download", "failed", "no network")
    answer = as_json(admin.get(url(f"api/workflows/{workflow}/")))
    assert answer["id"] == workflow and answer["total"] == 4
    assert [task["id"] for task in answer["tasks"]] == [fetch, webm, mp4, last]
    assert answer["tasks"][3]["depends_on"] == [webm, mp4]
    assert answer["progress"] == {"failed": 4}
    assert admin.get(url("api/workflows/no-such/")).status_code == 404


def test_the_task_page_follows_its_workflow_live(admin, blueque):
    """Its live poll's version changes when a task of its workflow changes state (the page
    then reloads, its progress moved)."""
    workflow = video_pipeline()
    last = workflow.task_ids[-1]
    before = as_json(admin.get(url(f"tasks/{last}/", live=1)))["version"]
    assert as_json(admin.get(url(f"tasks/{last}/", live=1)))["version"] == before
    run(blueque, "demo.download", "complete", '{"path": "/tmp/cat.mov"}')
    assert as_json(admin.get(url(f"tasks/{last}/", live=1)))["version"] != before


def test_a_long_depends_on_is_listed_whole(admin, blueque):
    from demo.tasks import report

    firsts = [report.enqueue(title=str(n)) for n in range(80)]  # ~3 kB of ids
    waiting = report.using(depends_on=firsts).enqueue(title="after")
    page = body(admin.get(url(f"tasks/{waiting}/")))
    listed = re.findall(r'tasks/([^/]+)/', re.search(
        r'<ul id="waits-for">(.*?)</ul>', page, re.S).group(1))
    assert listed == firsts


def test_the_api_lists_a_long_depends_on_whole(admin, blueque):
    workflow = chain(download.s("u/a.mov"), group(encode.s(fmt=str(n)) for n in range(20)),
                     publish.s()).enqueue()
    answer = as_json(admin.get(url(f"api/workflows/{workflow}/")))
    assert answer["tasks"][-1]["depends_on"] == workflow.task_ids[1:-1]
    page = body(admin.get(url(f"tasks/{workflow.task_ids[5]}/")))
    assert f"tasks/{workflow.task_ids[-1]}/" in re.search(
        r'<ul id="waited-by">(.*?)</ul>', page, re.S).group(1)
