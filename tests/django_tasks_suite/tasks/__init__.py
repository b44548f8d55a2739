import backport_shim  # noqa: F401  (harness: Django 5.2 + django-tasks; see ../README.md)
