"""Django's DEBUG technical 500 page must not show the Redis password (issue 38)."""

import sys

import pytest
from django.test import RequestFactory
from django.views.debug import get_default_exception_reporter_filter, technical_500_response

SECRET = "s3cret-redis-pass"


@pytest.fixture
def reporter_filter(settings):
    """The filter as a project sets it (Django caches the filter it made: made afresh here)."""
    settings.DEBUG = True
    settings.DEFAULT_EXCEPTION_REPORTER_FILTER = "django_blueque.debug.ReporterFilter"
    get_default_exception_reporter_filter.cache_clear()
    yield
    get_default_exception_reporter_filter.cache_clear()


def error_page(request):
    """The page of an error raised here: a frame whose locals hold no URL (Django shows a
    frame's locals unless marked sensitive_variables)."""
    try:
        raise RuntimeError("the view failed")
    except RuntimeError:
        return technical_500_response(request, *sys.exc_info()).content.decode()


@pytest.mark.parametrize("url", [
    f"redis://:{SECRET}@127.0.0.1:6379/0",
    f"rediss://default:{SECRET}@redis.example:6380/1",
    f"redis://127.0.0.1:6379/0?password={SECRET}",
    f"unix://:{SECRET}@/run/redis.sock?db=2",
])
def test_the_redis_password_of_blueque_url_is_masked(reporter_filter, settings, url):
    settings.BLUEQUE = {"URL": url}
    # in META as a BLUEQUE_URL environment variable would be (runserver copies the environment)
    page = error_page(RequestFactory().get("/broken/", HTTP_X_BLUEQUE_URL=url))
    assert "the view failed" in page and "BLUEQUE" in page
    assert SECRET not in page
    assert "***" in page


def test_a_cache_location_with_a_password_is_masked_too(reporter_filter, settings):
    settings.CACHES = {"default": {"BACKEND": "django_redis.cache.RedisCache",
                                   "LOCATION": [f"redis://:{SECRET}@cache-1:6379/1"]}}
    assert SECRET not in error_page(RequestFactory().get("/broken/"))
