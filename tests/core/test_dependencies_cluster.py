"""Dependencies in cluster mode (issue 40): a task may wait for tasks of its own queue (one
hash slot: each step stays one script); one of another queue is refused at enqueue."""

import pytest

from tests.core.test_cluster import client, queues  # noqa: F401  (fixtures)
from tests.core.test_dependencies import LISTENER


def test_a_chain_within_a_queue_and_a_refused_dependency_on_another(client, queues):  # noqa: F811
    queue, other = queues[0], queues[1]
    proto = client.protocol
    first = client.get_queue(queue).enqueue("a")
    after = client.get_queue(queue).enqueue("b", depends_on=[first], priority=3)
    assert client.get_task(after).status == "waiting"
    with pytest.raises(ValueError, match="in cluster mode a task can only wait for tasks of "
                                         "its own queue"):
        client.get_queue(other).enqueue("c", depends_on=[first])
    for expected, outcome in ((first, "complete"), (after, "failed")):
        task_id = proto.reserve(queue, LISTENER, "tok")[0]
        assert task_id == expected
        proto.start(queue, task_id, LISTENER, 42, "tok")
        proto.finish(queue, task_id, listener_id=LISTENER, pid=42, token="tok",
                     outcome=outcome, value="x")
    assert client.protocol.admin.retry(queue, after) == 1
    assert client.get_task(after).status == "pending"
