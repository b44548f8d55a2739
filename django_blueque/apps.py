from django.apps import AppConfig
from django.conf import settings
from django.utils.module_loading import autodiscover_modules
from django.utils.translation import gettext_lazy as _


class BluequeConfig(AppConfig):
    name = "django_blueque"
    verbose_name = _("Blueque")
    default_auto_field = "django.db.models.AutoField"

    def ready(self) -> None:
        from . import checks, conf  # noqa: F401  (checks: registers the system checks)

        conf.app_installed = True

        # Every installed app's tasks.py registers its @blueque_task functions, so bq_listen
        # finds every task without configuration.
        autodiscover_modules("tasks")
        if any(params.get("BACKEND") == "django_blueque.backends.BluequeBackend"
               for params in getattr(settings, "TASKS", {}).values()):
            # Django's Tasks framework (Django 6+) through Blueque: a queue per Tasks queue
            from .backends import register_queues

            register_queues()
