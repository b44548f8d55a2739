from testproject.settings import *  # noqa: F403

INSTALLED_APPS = [*INSTALLED_APPS, "tests.django_app.signal_recorder"]  # noqa: F405
