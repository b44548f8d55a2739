"""Where the Blueque pages are served, so that links stay where the user is.

The admin site always serves them (admin.py), named ``admin:blueque:<page>``. A project may
also include ``django_blueque.urls`` itself (the setup before the admin site served them);
its pages, named ``blueque:<page>``, are linked to when requests reach them, that is when the
include comes before ``admin.site.urls``, whose catch-all answers 404 for every path below
``admin/``. Pages link to each other through :func:`page_url` and ``{% bq_url %}``.
"""

import functools
from collections.abc import Sequence

from django.conf import settings
from django.urls import Resolver404, get_resolver, get_script_prefix, get_urlconf, reverse

OWN = "blueque"  # the app namespace of django_blueque.urls
ADMIN = "admin:blueque"


@functools.lru_cache(maxsize=8)
def _own_include(urlconf: str) -> tuple[str, bool] | None:
    """(path, reachable) of the project's own include of django_blueque.urls, or None."""
    resolver = get_resolver(urlconf)
    if OWN not in resolver.app_dict:
        return None
    path = reverse(f"{OWN}:dashboard", urlconf=urlconf)
    local = "/" + path[len(get_script_prefix()):]
    try:
        match = resolver.resolve(local)
    except Resolver404:
        return path, False
    return path, match.app_names == [OWN]


def own_include(urlconf: str | None = None) -> tuple[str, bool] | None:
    """(path of its dashboard, whether requests reach it) of the project's own include of
    django_blueque.urls, or None when the project has none."""
    return _own_include(urlconf or get_urlconf() or settings.ROOT_URLCONF)


def page_url(name: str, args: Sequence[object] = ()) -> str:
    """reverse() of a Blueque page named ``blueque:<page>``, on the mount the user is on:
    the project's own include when requests reach it, else the admin site's."""
    included = own_include()
    namespace = OWN if included and included[1] else ADMIN
    return reverse(f"{namespace}:{name.removeprefix(OWN + ':')}", args=args)
