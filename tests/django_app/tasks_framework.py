"""Tasks of Django's Tasks framework (Django 6+), run by bq_listen through BluequeBackend."""

from django.tasks import task


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
