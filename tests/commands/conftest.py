from tests.django_app.conftest import blueque, manage  # noqa: F401  (shared fixtures)
