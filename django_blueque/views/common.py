"""What every Blueque admin view shares: staff-only access (a login redirect, a 403), a page
(not a 500) when Redis does not answer or refuses, the admin's context, and small helpers."""

import hmac
import logging
from functools import wraps
from urllib.parse import urlencode

import redis
from django.contrib import admin
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import HttpResponse, JsonResponse
from django.shortcuts import render
from django.urls import NoReverseMatch, reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.translation import gettext as _
from django.views.decorators.cache import never_cache

from .. import actions
from ..conf import get_settings
from ..mount import page_url
from .live import POLL_SECONDS

logger = logging.getLogger("django_blueque.admin")


def _login_or_refuse(request, permission):
    """None if the user may go on; a redirect to the admin login for anonymous users."""
    user = request.user
    if not user.is_authenticated:
        return redirect_to_login(request.get_full_path(), reverse("admin:login"))
    if not (user.is_active and user.is_staff and user.has_perm(permission)):
        raise PermissionDenied
    return None


def _unavailable(request, exc, json=False):
    logger.warning("Redis unreachable from the admin: %s", exc)
    if json:
        return JsonResponse({"error": f"Redis unreachable: {exc}"}, status=503)
    return render(request, "django_blueque/unavailable.html",
                  admin_context(request, _("Redis is unreachable"), error=str(exc)), status=503)


def _refused(request, exc, json=False):
    """Redis refused what was asked (the scripts check keys' types before writing anything):
    nothing was changed, and the page says why."""
    logger.warning("Redis refused an admin request to %s: %s", request.path, exc)
    if json:
        return JsonResponse({"error": f"Redis refused the request: {exc}"}, status=409)
    return render(request, "django_blueque/unavailable.html", admin_context(
        request, _("Redis refused the request"), error=str(exc), refused=True), status=409)


def staff_view(permission=None, *, json=False):
    """Staff with the view permission (and ``permission``, if given) only; a page, not a 500,
    when Redis does not answer (``json``: a view that answers JSON answers its errors in
    JSON too, for the script that polls it)."""
    def decorator(view):
        @wraps(view)
        def wrapped(request, *args, **kwargs):
            for needed in (actions.PERMISSIONS["view"], permission):
                refused = needed and _login_or_refuse(request, needed)
                if refused:
                    return refused
            try:
                return view(request, *args, **kwargs)
            except (redis.ConnectionError, redis.TimeoutError) as exc:
                return _unavailable(request, exc, json)
            except redis.ResponseError as exc:  # e.g. an action's script met a wrong type
                return _refused(request, exc, json)
        return never_cache(wrapped)
    return decorator


def metrics_view(view=None, *, json=False):
    """Staff with the view permission, or a scraper with ``BLUEQUE['METRICS_TOKEN']`` as a
    Bearer token (a wrong token is a 401, not a login page). Another scheme (the Basic of a
    site behind a basic-auth proxy) is the browser's, not a scraper's: the session decides.
    ``json``: see staff_view."""
    if view is None:
        return lambda view: metrics_view(view, json=json)
    staff = staff_view(json=json)(view)

    @wraps(view)
    def wrapped(request):
        scheme, _sep, given = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer":  # none, or a basic-auth proxy's: the staff session
            return staff(request)
        token = get_settings().metrics_token
        if not (token and hmac.compare_digest(given.strip().encode(), token.encode())):
            response = HttpResponse(_("Invalid metrics token.\n"), status=401,
                                    content_type="text/plain; charset=utf-8")
            response["WWW-Authenticate"] = 'Bearer realm="blueque"'
            return response
        try:
            return view(request)
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            if json:
                return JsonResponse({"error": f"Redis unreachable: {exc}"}, status=503)
            return HttpResponse(f"Redis unreachable: {exc}\n", status=503,
                                content_type="text/plain; charset=utf-8")
    return never_cache(wrapped)


def live_url(request):
    """The URL a page's script polls (see live.py): the page's own, with ``live=1``."""
    path = request.get_full_path()
    return f"{path}{'&' if '?' in path else '?'}live=1"


def admin_context(request, title, **extra):
    """The admin's context, without its navigation sidebar: these pages are wide tables,
    and the sidebar's app list costs more to render than a page of tasks."""
    context = admin.site.each_context(request)
    if "live_version" in extra:  # a page that follows its data (live.py)
        extra.setdefault("live_url", live_url(request))
        extra["live_poll"] = POLL_SECONDS
    context.update(title=title, is_nav_sidebar_enabled=False, **extra)
    return context


def next_url(request, fallback):
    """The page to go back to: the form's ``next`` if it is on this site, else ``fallback``."""
    url = request.POST.get("next") or request.GET.get("next")
    if url and url_has_allowed_host_and_scheme(url, allowed_hosts={request.get_host()},
                                               require_https=request.is_secure()):
        return url
    return fallback


def whole_number(value, default):
    """A positive whole number from a query parameter; None when malformed."""
    if value is None:
        return default
    return int(value) if value.isdigit() and 0 < len(value) < 10 and int(value) > 0 else None


def task_url(task_id):
    try:
        return page_url("blueque:task", args=[task_id])
    except NoReverseMatch:
        return f"{page_url('blueque:find')}?{urlencode({'id': task_id})}"
