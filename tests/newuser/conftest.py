"""A new user's first hour (issue 13): the project's settings on the session's private Redis."""

import pytest

from tests.django_app.conftest import Manage


@pytest.fixture
def blueque(settings, redis_url):
    """BLUEQUE pointed at the private Redis (emptied for the test)."""
    settings.BLUEQUE = {"URL": redis_url}
    return settings.BLUEQUE


@pytest.fixture
def manage(redis_url, tmp_path):
    """testproject's manage.py as real processes against the private Redis."""
    runner = Manage(redis_url, tmp_path)
    yield runner
    runner.stop_all()
