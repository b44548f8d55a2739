"""System checks: a malformed BLUEQUE setting fails ``manage.py check`` with an id and a hint;
a part of it that is ignored, and an include of django_blueque.urls that requests never reach,
are warnings."""

from collections.abc import Sequence
from typing import Any

from django.apps import AppConfig
from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, Warning, register

from . import mount, setting_checks


@register(Tags.compatibility)
def check_settings(app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
                   ) -> list[CheckMessage]:
    missing = setting_checks.missing_setting()
    if missing:
        return [Warning(missing.msg, hint=missing.hint, id=missing.id, obj="settings")]
    return [*(Error(problem.msg, hint=problem.hint, id=problem.id, obj="settings.BLUEQUE")
              for problem in setting_checks.problems()),
            *(Warning(problem.msg, hint=problem.hint, id=problem.id, obj="settings.BLUEQUE")
              for problem in setting_checks.ignored())]


@register(Tags.urls)
def check_own_include(app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
                      ) -> list[CheckMessage]:
    if not getattr(settings, "ROOT_URLCONF", None):
        return []
    included = mount.own_include()
    if included is None or included[1]:
        return []
    return [Warning(
        f"django_blueque.urls is included at {included[0]}, but requests there never reach it: "
        "a pattern before it answers them (admin.site.urls answers 404 for every path below "
        "admin/).",
        hint="Remove the include: the admin site serves the Blueque pages (its index links to "
             "them). Or move it before path('admin/', admin.site.urls).",
        obj=settings.ROOT_URLCONF, id="blueque.W001")]
