"""The smallest Django settings that import every documented module (autodoc) and run the
doctests: eager tasks need no Redis; the doctests that talk to one use
BLUEQUE_DOCS_REDIS_URL."""

import os

SECRET_KEY = "docs-not-secret"
USE_TZ = True
INSTALLED_APPS = ["django.contrib.contenttypes", "django.contrib.auth", "django_blueque"]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}
BLUEQUE = {"URL": os.environ.get("BLUEQUE_DOCS_REDIS_URL", "redis://docs.invalid:6379/0")}
