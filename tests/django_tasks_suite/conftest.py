"""Runs Django's own tests/tasks (copied in ./tasks, importable as ``tasks`` as in Django's
test suite) against BluequeBackend and a private Redis; see README.md."""

import django
import pytest

# Tests of features BluequeBackend declares unsupported, or of Django's stand-in backends'
# own behaviour; each is checked the other way round in tests/django_app/test_tasks_backend.py
# or explained in README.md.
DESELECTED = {
    "test_immediate_backend.py::ImmediateBackendTestCase::test_throws_keyboard_interrupt":
        "a KeyboardInterrupt raised in the worker cannot reach the enqueuing process",
    "test_immediate_backend.py::ImmediateBackendTestCase::test_cannot_get_result":
        "BluequeBackend supports get_result",
    "test_immediate_backend.py::ImmediateBackendTestCase::test_cannot_refresh_result":
        "BluequeBackend supports get_result",
    "test_immediate_backend.py::ImmediateBackendTestCase::test_cannot_pass_run_after":
        "BluequeBackend supports run_after",
    "test_dummy_backend.py::DummyBackendTestCase::test_refresh_result":
        "edits DummyBackend's result objects in memory; results in Redis change by running",
    "test_dummy_backend.py::DummyBackendTestCase::test_refresh_result_async":
        "edits DummyBackend's result objects in memory; results in Redis change by running",
}

# Django 5.2: tests of what Django 6.1's framework has and the django-tasks 0.12 backport lacks
# (they fail the same way with the backport's own backends).
if django.VERSION < (6,):
    DESELECTED.update({
        "test_dummy_backend.py::DummyBackendTestCase::test_validate_disallowed_async_task":
            "the backport's message says 'async tasks', not 'async Tasks'",
        "test_tasks.py::TaskTestCase::test_pickle_task": "the backport's Task does not pickle",
        "test_tasks.py::TaskTestCase::test_pickle_task_result":
            "the backport's Task does not pickle",
        "test_tasks.py::TaskTestCase::test_unpickle_arbitrary_string":
            "the backport's Task has no _reconstruct",
        "test_tasks.py::TaskTestCase::test_unpickle_non_task_object":
            "the backport's Task has no _reconstruct",
        "test_tasks.py::TaskTestCase::test_run_after_in_decorator":
            "the backport's @task accepts run_after",
    })


def pytest_collection_modifyitems(config, items):
    keep, drop = [], []
    for item in items:
        (drop if any(item.nodeid.endswith(name) for name in DESELECTED) else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.fixture(autouse=True)
def blueque_redis(settings, redis_url):
    """Every test's tasks go to the private Redis, emptied for it."""
    settings.BLUEQUE = {"URL": redis_url}
