"""The admin pages with Django's test client, on the testproject's settings and the private
Redis of the session (tests/conftest.py)."""

import pytest
from django.contrib.auth.models import Permission, User


@pytest.fixture
def blueque(settings, redis_url):
    """The engine Client the pages use, on the private Redis (emptied for each test)."""
    settings.BLUEQUE = {**settings.BLUEQUE, "URL": redis_url}
    from django_blueque.conf import get_client

    return get_client()


@pytest.fixture(autouse=True)
def fast_passwords(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def make_user(db):
    """A user: staff by default, with the given django_blueque permissions."""
    def make(name, *codenames, staff=True, superuser=False):
        if superuser:
            return User.objects.create_superuser(name, f"{name}@example.com", "pw")
        user = User.objects.create_user(name, password="pw", is_staff=staff)
        user.user_permissions.add(*Permission.objects.filter(
            content_type__app_label="django_blueque", codename__in=codenames))
        return user
    return make


@pytest.fixture
def admin(client, make_user, blueque):
    """The test client logged in as a superuser."""
    client.force_login(make_user("root", superuser=True))
    return client
