"""What Django's DEBUG error page and error reports may show of Blueque's settings.

Django's SafeExceptionReporterFilter hides settings whose *name* looks secret (API, TOKEN, KEY,
SECRET, PASS, SIGNATURE); a Redis URL's password is under a name that does not (BLUEQUE["URL"],
a cache's LOCATION, a BLUEQUE_URL environment variable in request.META), so it was shown.
"""

from typing import Any

from django.views.debug import SafeExceptionReporterFilter

from .redacted import masked_url

REDIS_SCHEMES = ("redis://", "rediss://", "unix://")


class ReporterFilter(SafeExceptionReporterFilter):
    """Django's filter that also masks the password of every Redis URL among the settings and
    the request's META; set ``DEFAULT_EXCEPTION_REPORTER_FILTER`` to
    ``"django_blueque.debug.ReporterFilter"``."""

    def cleanse_setting(self, key: Any, value: Any) -> Any:
        cleansed = super().cleanse_setting(key, value)
        if isinstance(cleansed, str) and cleansed.lower().startswith(REDIS_SCHEMES):
            return masked_url(cleansed)
        return cleansed
