"""The task page's checkpoint and per-run resources, and the Start over action (issue 39)."""

import json

from .helpers import body, messages_of, start_task, url
from .test_actions import act


def checkpointed_failure(blueque, queue="q", state=None):
    """A task that saved a checkpoint and its resources in its run, then failed."""
    task_id, token = start_task(blueque, queue)
    assert blueque.protocol.runs.save_checkpoint(task_id, token, json.dumps(state or {"step": 3}))
    assert blueque.protocol.finish(
        queue, task_id, listener_id="node-1_4242", pid=4343, token=token, outcome="failed",
        value="exceeded its memory limit of 300 MiB", error_type="MemoryLimitExceeded",
        retryable=False, usage={"peak_memory": 300 * 1024**2, "cpu": 12.5}) == "failed"
    return task_id


def test_the_task_page_shows_the_checkpoint_its_time_and_each_runs_resources(admin, blueque):
    task_id = checkpointed_failure(blueque, state={"step": 3, "file": "<b>x</b>"})
    page = body(admin.get(url(f"tasks/{task_id}/")))
    assert 'id="field-checkpoint"' in page
    assert "&quot;step&quot;: 3" in page and "&lt;b&gt;x&lt;/b&gt;" in page  # escaped
    assert 'id="checkpoint-time"' in page and "the next run resumes from it" in page
    assert "last checkpoint" in page  # on the timeline
    usage = page.split('id="usage"')[1].split("</table>")[0]
    assert "<td>1</td><td>300 MiB</td><td>12.50 s</td>" in usage
    assert 'id="action-start_over"' in page


def test_start_over_clears_the_checkpoint_and_retries_while_retry_keeps_it(admin, blueque):
    kept = checkpointed_failure(blueque)
    act(admin, "retry", [kept])
    assert json.loads(blueque.get_task(kept).checkpoint) == {"step": 3}
    fresh = checkpointed_failure(blueque, "other")
    response = act(admin, "start_over", [fresh])
    assert messages_of(response) == ["Started 1 task over: its checkpoint is cleared."]
    task = blueque.get_task(fresh)
    assert (task.status, task.checkpoint, task.checkpoint_at) == ("pending", None, None)


def test_start_over_leaves_a_running_task_alone(admin, blueque):
    task_id, token = start_task(blueque, "q")
    blueque.protocol.runs.save_checkpoint(task_id, token, '{"step": 1}')
    response = act(admin, "start_over", [task_id])
    assert "1 task was left alone" in " ".join(messages_of(response))
    assert blueque.get_task(task_id).checkpoint == '{"step": 1}'


def test_garbage_in_the_checkpoint_and_usage_fields_is_shown_never_a_500(admin, blueque, r):
    task_id = checkpointed_failure(blueque)
    r.hset(blueque.keys.task(task_id), mapping={
        "checkpoint": "\x00{not json", "checkpoint_at": "soon",
        "usage": '[{"peak_memory": "lots"}, 7, {"attempt": 2, "peak_memory": 1024, "cpu": 1}]'})
    response = admin.get(url(f"tasks/{task_id}/"))
    assert response.status_code == 200
    page = body(response)
    assert "{not json" in page and 'id="checkpoint-time"' not in page
    usage = page.split('id="usage"')[1].split("</table>")[0]
    assert usage.count("<tr><td>") == 1 and "<td>2</td><td>1 KiB</td><td>1.00 s</td>" in usage
    r.hset(blueque.keys.task(task_id), "usage", "{")
    assert 'id="usage"' not in body(admin.get(url(f"tasks/{task_id}/")))
