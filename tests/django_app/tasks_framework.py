"""Tasks of Django's Tasks framework, run by bq_listen through BluequeBackend."""

from django_blueque.tasks_compat import task


@task
def add(a, b):
    return a + b


@task
def explode(message):
    raise ValueError(message)


@task(takes_context=True)
def which_attempt(context):
    return {"attempt": context.attempt, "id": context.task_result.id}


@task(queue_name="other")
def shout(text):
    return text.upper()


@task
async def add_later(a, b):
    return a + b


@task
def returns_a_set():
    return {1, 2}


@task(takes_context=True)
def where_am_i(context):
    """What the worker rebuilt: the Task's backend, queue and run_after."""
    task = context.task_result.task
    return {"backend": task.backend, "queue_name": task.queue_name,
            "run_after": task.run_after.isoformat() if task.run_after else None}


def not_a_task():
    return "a plain function"


@task(queue_name="other", takes_context=True)
def fails_twice(context):
    """Fails on its first two runs (its test allows two retries)."""
    if context.attempt < 3:
        raise ValueError(f"run {context.attempt} failed")
    return context.attempt


@task(queue_name="other")
def marked(seconds):
    """Marks its run's start and end (limits_app.tasks.MARKS), for the limits' test."""
    from tests.django_app.limits_app.tasks import marked_run

    marked_run(seconds)
