"""An operator follows a workflow in a real browser (issue 40): the video pipeline's last step
waits for the encodes; its page lists them with their states and follows them live until the
workflow is done; a link leads to a step's own page."""

import json
import uuid

import pytest

from django_blueque.core import Client
from django_blueque.core.protocol_workflows import WorkflowTask
from tests.browser.test_admin_browser import log_in

pytestmark = pytest.mark.browser


def test_the_last_steps_page_follows_the_workflow_to_its_end(page, site, shot):
    client = Client(site["redis_url"])
    keys = client.keys
    fetch = keys.new_task_id("demo.download")
    encodes = [keys.new_task_id("demo.encode") for _ in range(3)]
    last = keys.new_task_id("demo.publish")
    workflow = str(uuid.uuid4())
    client.protocol.workflows.enqueue_workflow(workflow, [
        WorkflowTask("demo.download", json.dumps({"url": "https://example.com/cat.mov"}), {},
                     fetch),
        *[WorkflowTask("demo.encode", json.dumps({"fmt": fmt}),
                       {"depends_on": json.dumps([fetch])}, task_id)
          for fmt, task_id in zip(("webm", "mp4", "ogv"), encodes, strict=True)],
        WorkflowTask("demo.publish", "{}", {"depends_on": json.dumps(encodes)}, last)])
    log_in(page, site, f"/admin/django_blueque/queue/tasks/{last}/")
    assert page.locator("#waits-for li").count() == 3
    assert f"Workflow {workflow}" in page.inner_text("#dependencies")
    shot(page, "workflow-01-waiting")
    # the page reloads itself as the steps end, until the last one completes
    page.wait_for_selector(".blueque-summary .blueque-status.status-complete", timeout=60_000)
    assert "5 of 5 complete, 0 failed, 0 running" in page.inner_text("#workflow-progress")
    assert page.locator("#waits-for .status-complete").count() == 3
    shot(page, "workflow-02-done")
    page.click(f"#waits-for a[href*='{encodes[0]}']")
    page.wait_for_selector("#waited-by")
    assert page.locator(f"#waited-by a[href*='{last}']").count() == 1
    assert page.locator(f"#waits-for a[href*='{fetch}']").count() == 1
