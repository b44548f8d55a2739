"""The ``BLUEQUE`` setting's keys, their defaults, and every mistake a setting can make.

:func:`problems` finds each mistake (the system checks report it with an id and a hint, and
conf.get_settings raises it as ImproperlyConfigured at first use otherwise); :func:`ignored`
and :func:`missing_setting` find what a setting gives in vain or forgets (warnings).
"""

import difflib
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeGuard, overload

from django.conf import settings as django_settings

from .core.admission import Admission
from .core.keys import DEFAULT_PREFIX, valid_name
from .core.limits import cpu_seconds, memory_bytes
from .core.timings import Timings
from .redacted import masked_url

DEFAULT_URL = "redis://localhost:6379/0"

POLICY_KEYS = ("RETRIES", "BACKOFF", "TIMEOUT", "RETENTION")
LIMIT_KEYS = ("MEMORY_LIMIT", "CPU_LIMIT")  # a task process's rlimits (core/limits.py)
ADMISSION_KEYS = ("MAX_RUNNING", "MAX_RUNNING_PER_KEY", "RATE_LIMIT")  # per queue: admission.py
LEASE_KEY = "LEASE"  # per queue: a longer lease than TIMINGS' (Timings.for_queue)
QUEUE_KEYS = (*POLICY_KEYS, *LIMIT_KEYS, *ADMISSION_KEYS, LEASE_KEY)

DEFAULTS: dict[str, Any] = {  # the BLUEQUE setting's keys (its values: see problems())
    "URL": None,
    "CACHE": None,
    "OPTIONS": {},
    "SENTINELS": None,
    "SERVICE_NAME": None,
    "SENTINEL_OPTIONS": {},
    "CLUSTER": False,
    "PREFIX": DEFAULT_PREFIX,
    "RETRIES": 0,
    "BACKOFF": 20,
    "TIMEOUT": None,
    "RETENTION": 7 * 24 * 3600,
    "MEMORY_LIMIT": None,
    "CPU_LIMIT": None,
    "QUEUES": {},
    "EAGER": False,
    "CONCURRENCY": 1,
    "KILL_GRACE": 10,
    "SCHEDULER_INTERVAL": 1.0,
    "REAPER_INTERVAL": 5.0,
    "METRICS_TOKEN": None,
    "API_TOKENS": {},
    "WAIT_REPLICAS": 0,
    "WAIT_TIMEOUT": 1.0,
    "TIMINGS": None,
}


@dataclass(frozen=True)
class Problem:
    """One mistake in the setting (or a part of it ignored), as a system check reports it."""

    id: str
    msg: str
    hint: str


@overload
def _valid_number(value: object, allow_none: Literal[False] = False, integer: bool = False
                  ) -> TypeGuard[float]: ...
@overload
def _valid_number(value: object, allow_none: bool, integer: bool = False) -> bool: ...
def _valid_number(value: object, allow_none: bool = False, integer: bool = False) -> bool:
    """Whether a setting's Python value is a finite number >= 0 (not a bool; a whole one with
    ``integer``; None only with ``allow_none``). Settings are Python values, not strings."""
    if value is None:
        return allow_none
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    if integer and int(value) != value:
        return False
    return math.isfinite(value) and value >= 0


def _policy_problems(policy: Mapping[str, object], where: str) -> list[Problem]:
    problems = []
    for name in POLICY_KEYS:
        if name not in policy:
            continue
        value = policy[name]
        ok = _valid_number(value, allow_none=name in ("TIMEOUT", "RETENTION"),
                           integer=name == "RETRIES")
        if not ok:
            kind = "a whole number >= 0" if name == "RETRIES" else "a number of seconds >= 0"
            if name in ("TIMEOUT", "RETENTION"):
                kind += " or None"
            problems.append(Problem("blueque.E006", f"{where}['{name}'] must be {kind}, not "
                                    f"{value!r}.", f"Set {where}['{name}'] to {kind}."))
    return problems


def _limit_problems(policy: Mapping[str, object], where: str) -> list[Problem]:
    problems = []
    for name, read, problem_id, example in (
            ("MEMORY_LIMIT", memory_bytes, "blueque.E027", "'2G'"),
            ("CPU_LIMIT", cpu_seconds, "blueque.E028", "3600")):
        if policy.get(name) is None:
            continue
        try:
            read(policy[name])
        except ValueError as exc:
            problems.append(Problem(problem_id, f"{where}['{name}']: {exc}.",
                                    f"For example {example}, or None for no limit."))
    return problems


def _admission_problems(policy: Mapping[str, object], where: str) -> list[Problem]:
    problems = []
    for name in ADMISSION_KEYS:  # one at a time, so that each problem names its key
        try:
            Admission.of({name.lower(): policy.get(name)})
        except ValueError as exc:
            problems.append(Problem(
                "blueque.E029", f"{where}['{name}']: {exc}.", "For example {'MAX_RUNNING': 2, "
                "'MAX_RUNNING_PER_KEY': 1, 'RATE_LIMIT': '30/m'}, or leave the key out."))
    return problems


def _lease_problems(policy: Mapping[str, object], where: str, timings: object
                    ) -> list[Problem]:
    try:
        lease = Timings.from_setting(timings).lease
    except (TypeError, ValueError):
        lease = Timings().lease  # TIMINGS' own problem is blueque.E018
    if LEASE_KEY not in policy:
        return []
    try:
        Timings(lease=lease).for_queue({"lease": policy[LEASE_KEY]})
    except ValueError as exc:
        return [Problem("blueque.E030", f"{where}['{LEASE_KEY}']: {exc}.",
                        "Give a longer lease to a queue whose tasks may hold their process "
                        "for long (a C call holding the GIL); leave the key out otherwise.")]
    return []


def problems(raw: object = None) -> list[Problem]:
    """Every mistake in the BLUEQUE setting (``raw`` defaults to the project's)."""
    if raw is None:
        raw = getattr(django_settings, "BLUEQUE", {})
    if not isinstance(raw, dict):
        return [Problem("blueque.E001", f"BLUEQUE must be a dict, not {type(raw).__name__}.",
                        "Set BLUEQUE = {'URL': 'redis://localhost:6379/0'}.")]
    found = []
    for key in sorted(set(raw) - set(DEFAULTS), key=str):
        near = difflib.get_close_matches(str(key).upper(), DEFAULTS, n=1)
        found.append(Problem("blueque.E002", f"BLUEQUE has an unknown key: {key!r}.",
                             f"Did you mean {near[0]!r}?" if near else
                             f"Known keys: {', '.join(DEFAULTS)}."))
    sources = [name for name in ("URL", "CACHE", "SENTINELS") if raw.get(name)]
    if len(sources) > 1:
        found.append(Problem("blueque.E003",
                             f"BLUEQUE names its Redis more than once: {' and '.join(sources)}.",
                             "Give exactly one of URL, CACHE or SENTINELS."))
    url = raw.get("URL")
    if url is not None and (not isinstance(url, str) or
                            not url.startswith(("redis://", "rediss://", "unix://"))):
        shown = (repr(masked_url(url)) if isinstance(url, str)
                 else f"of type {type(url).__name__}, not a string")
        found.append(Problem("blueque.E004", f"BLUEQUE['URL'] is not a Redis URL: {shown}.",
                             "Use redis://[:password@]host:port/db, rediss:// for TLS, or "
                             "unix:///path/to/socket."))
    alias = raw.get("CACHE")
    if alias is not None:
        caches = getattr(django_settings, "CACHES", {})
        if alias not in caches:
            found.append(Problem("blueque.E005", f"BLUEQUE['CACHE'] names cache {alias!r}, "
                                 "which CACHES does not define.",
                                 f"Define CACHES[{alias!r}] or fix the alias."))
        elif not str(caches[alias].get("BACKEND", "")).startswith("django_redis."):
            found.append(Problem("blueque.E005", f"BLUEQUE['CACHE'] names cache {alias!r}, "
                                 f"whose backend {caches[alias].get('BACKEND')!r} is not "
                                 "django-redis.",
                                 "Use a cache with BACKEND 'django_redis.cache.RedisCache', "
                                 "or give BLUEQUE['URL'] instead."))
    if raw.get("SENTINELS") is not None:
        sentinels = raw["SENTINELS"]
        if not (isinstance(sentinels, (list, tuple)) and sentinels and all(
                isinstance(s, (list, tuple)) and len(s) == 2 for s in sentinels)):
            found.append(Problem("blueque.E007", "BLUEQUE['SENTINELS'] must be a list of "
                                 f"(host, port) pairs, not {sentinels!r}.",
                                 "Example: 'SENTINELS': [('sentinel-1', 26379)]."))
        if not isinstance(raw.get("SERVICE_NAME"), str) or not raw.get("SERVICE_NAME"):
            found.append(Problem("blueque.E007", "BLUEQUE['SENTINELS'] needs "
                                 "BLUEQUE['SERVICE_NAME'], the name of the monitored master.",
                                 "Example: 'SERVICE_NAME': 'mymaster'."))
    for name in ("OPTIONS", "SENTINEL_OPTIONS"):
        if name in raw and not isinstance(raw[name], dict):
            found.append(Problem("blueque.E008", f"BLUEQUE['{name}'] must be a dict of "
                                 f"redis-py connection options, not {type(raw[name]).__name__}.",
                                 "Example: {'socket_timeout': 5, 'health_check_interval': 30}."))
    prefix = raw.get("PREFIX", DEFAULT_PREFIX)
    if not valid_name(prefix):
        found.append(Problem("blueque.E009", f"BLUEQUE['PREFIX'] must be a non-empty string "
                             f"without spaces, not {prefix!r}.",
                             "Leave it out to use 'blueque', what blueque 1.0 writes."))
    found += _policy_problems(raw, "BLUEQUE") + _limit_problems(raw, "BLUEQUE")
    queues = raw.get("QUEUES", {})
    if not isinstance(queues, dict):
        found.append(Problem("blueque.E010", "BLUEQUE['QUEUES'] must be a dict of queue name to "
                             "policy overrides.", "Example: {'video.encode': {'TIMEOUT': 7200}}."))
    else:
        for queue, policy in queues.items():
            where = f"BLUEQUE['QUEUES'][{queue!r}]"
            if not valid_name(queue):
                found.append(Problem("blueque.E010", f"{where}: invalid queue name.",
                                     "Queue names are non-empty and have no spaces."))
            elif not isinstance(policy, dict) or set(policy) - set(QUEUE_KEYS):
                found.append(Problem("blueque.E010", f"{where} must be a dict with keys among "
                                     f"{', '.join(QUEUE_KEYS)}.", f"Got {policy!r}."))
            else:
                found += (_policy_problems(policy, where) + _limit_problems(policy, where)
                          + _admission_problems(policy, where)
                          + _lease_problems(policy, where, raw.get("TIMINGS")))
    for name in ("SCHEDULER_INTERVAL", "REAPER_INTERVAL", "KILL_GRACE"):
        if name in raw and not (_valid_number(raw[name]) and raw[name] > 0):
            found.append(Problem("blueque.E011", f"BLUEQUE['{name}'] must be a number of "
                                 f"seconds > 0, not {raw[name]!r}.", "Leave it out for the "
                                 f"default, {DEFAULTS[name]}."))
    concurrency = raw.get("CONCURRENCY", 1)
    if not (_valid_number(concurrency, integer=True) and concurrency >= 1):
        found.append(Problem("blueque.E012", f"BLUEQUE['CONCURRENCY'] must be a whole number "
                             f">= 1, not {concurrency!r}.", "It is the default for "
                             "bq_listen --concurrency."))
    if not isinstance(raw.get("EAGER", False), bool):
        found.append(Problem("blueque.E013", "BLUEQUE['EAGER'] must be True or False.",
                             "Set it True in test settings to run tasks inline."))
    replicas = raw.get("WAIT_REPLICAS", 0)
    if not _valid_number(replicas, integer=True):
        found.append(Problem("blueque.E015", f"BLUEQUE['WAIT_REPLICAS'] must be a whole number "
                             f">= 0, not {replicas!r}.", "0 (the default) waits for no "
                             "replica; 1 makes a task's start and end wait for one."))
    wait_timeout = raw.get("WAIT_TIMEOUT")
    if "WAIT_TIMEOUT" in raw and not (_valid_number(wait_timeout) and wait_timeout > 0):
        found.append(Problem("blueque.E015", f"BLUEQUE['WAIT_TIMEOUT'] must be a number of "
                             f"seconds > 0, not {raw['WAIT_TIMEOUT']!r}.", "Leave it out for "
                             f"the default, {DEFAULTS['WAIT_TIMEOUT']}."))
    found += _cluster_problems(raw)
    try:
        Timings.from_setting(raw.get("TIMINGS"))
    except (TypeError, ValueError) as exc:
        found.append(Problem("blueque.E018", f"BLUEQUE['TIMINGS'] is not valid: {exc}.",
                             "Leave it out for the defaults (a 15 s lease); e.g. {'LEASE': 60} "
                             "for a longer lease. See the liveness page of the docs."))
    token = raw.get("METRICS_TOKEN")
    if token is not None and (not isinstance(token, str) or len(token) < 16):
        found.append(Problem("blueque.E014", "BLUEQUE['METRICS_TOKEN'] must be a string of at "
                             "least 16 characters.", "Generate one with "
                             "python -c 'import secrets; print(secrets.token_urlsafe())'."))
    tokens = raw.get("API_TOKENS", {})
    if not isinstance(tokens, dict) or not all(
            isinstance(token, str) and len(token) >= 16 and isinstance(user, str) and user
            for token, user in tokens.items()):
        found.append(Problem("blueque.E016", "BLUEQUE['API_TOKENS'] must map tokens (strings "
                             "of at least 16 characters) to usernames.", "For example "
                             "{'<python -c \"import secrets; print(secrets.token_urlsafe())\">': "
                             "'reports-bot'}; the JSON API then acts as that user."))
    return found


SENTINEL_REPLACES = ("host", "port")
"""OPTIONS keys that Sentinel's answer replaces: with SENTINELS no connection goes there
(connections._AsksSentinel), and blueque.W002 says so."""


def ignored(raw: object = None) -> list[Problem]:
    """What the BLUEQUE setting gives in vain (``raw`` defaults to the project's): system check
    warnings, since the setting works without it."""
    if raw is None:
        raw = getattr(django_settings, "BLUEQUE", {})
    if not isinstance(raw, dict) or not raw.get("SENTINELS"):
        return []
    options = raw.get("OPTIONS")
    given = [name for name in SENTINEL_REPLACES if isinstance(options, dict) and name in options]
    if not given:
        return []
    return [Problem("blueque.W002", f"BLUEQUE['OPTIONS'] gives {' and '.join(given)}, which "
                    "SENTINELS replaces: every connection goes where Sentinel names the "
                    "primary, never there.", f"Remove {' and '.join(given)} from "
                    "BLUEQUE['OPTIONS']; the Sentinels' addresses are SENTINELS.")]


def _cluster_problems(raw: dict[str, Any]) -> list[Problem]:
    """CLUSTER: a bool; True only with a URL (a node of the cluster), no WAIT_REPLICAS, and
    queue names without braces."""
    cluster = raw.get("CLUSTER", False)
    if not isinstance(cluster, bool):
        return [Problem("blueque.E017", "BLUEQUE['CLUSTER'] must be True or False.",
                        "Set it True when URL names a node of a Redis Cluster.")]
    if cluster and (raw.get("CACHE") or raw.get("SENTINELS")):
        return [Problem("blueque.E017", "BLUEQUE['CLUSTER'] needs a URL, not CACHE or "
                        "SENTINELS.", "Give the URL of any node of the cluster, e.g. "
                        "'redis://node-1:7000/0'.")]
    if cluster and raw.get("WAIT_REPLICAS"):
        return [Problem("blueque.E017", "BLUEQUE['WAIT_REPLICAS'] is not available with "
                        "CLUSTER.", "Leave WAIT_REPLICAS out, or at 0.")]
    braced = [name for name in raw.get("QUEUES") or {} if isinstance(name, str) and (
        "{" in name or "}" in name)]
    if cluster and braced:
        return [Problem("blueque.E017", f"BLUEQUE['QUEUES'] names {braced[0]!r}: with CLUSTER "
                        "a queue name is a hash tag, and cannot hold braces.",
                        "Rename the queue.")]
    return []


def missing_setting() -> Problem | None:
    """The warning when settings.BLUEQUE is absent: everything then silently writes to the
    default Redis, often a server other programs share. Names a misspelt setting if any."""
    if hasattr(django_settings, "BLUEQUE"):
        return None
    names = [name for name in dir(django_settings) if name.isupper()]
    near = sorted({name for name in names if name.startswith("BLUEQUE")} |
                  set(difflib.get_close_matches("BLUEQUE", names, n=3, cutoff=0.7)))
    hint = ("Rename " + " or ".join(near) + " to BLUEQUE." if near else
            "Set BLUEQUE = {'URL': 'redis://host:6379/0'} to name your Redis, even when it is "
            "the default.")
    return Problem("blueque.W003", f"settings.BLUEQUE is not set: Blueque uses {DEFAULT_URL}, "
                   "which may be a Redis other programs share.", hint)
