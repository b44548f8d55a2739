"""The ``BLUEQUE`` setting: read, validated and defaulted here and nowhere else.

Every mistake is found by :func:`problems` (used by the system checks, so ``manage.py check``
reports it with an id and a hint) and raised as ImproperlyConfigured at first use otherwise.
"""

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any, Literal, TypedDict, TypeGuard, cast, overload

from django.conf import settings as django_settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.dispatch import receiver

from .core import Client
from .core.connections import sentinel_redis
from .core.keys import DEFAULT_PREFIX, valid_name
from .redacted import masked_url

DEFAULT_URL = "redis://localhost:6379/0"

POLICY_KEYS = ("RETRIES", "BACKOFF", "TIMEOUT", "RETENTION")

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
}


@dataclass(frozen=True)
class Problem:
    """One mistake in the setting, as a system check reports it."""

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


def problems(raw: object = None) -> list[Problem]:
    """Every mistake in the BLUEQUE setting (``raw`` defaults to the project's)."""
    if raw is None:
        raw = getattr(django_settings, "BLUEQUE", {})
    if not isinstance(raw, dict):
        return [Problem("blueque.E001", f"BLUEQUE must be a dict, not {type(raw).__name__}.",
                        "Set BLUEQUE = {'URL': 'redis://localhost:6379/0'}.")]
    found = []
    unknown = sorted(set(raw) - set(DEFAULTS))
    if unknown:
        found.append(Problem("blueque.E002", f"BLUEQUE has unknown key(s): {', '.join(unknown)}.",
                             f"Known keys: {', '.join(DEFAULTS)}."))
    sources = [name for name in ("URL", "CACHE", "SENTINELS") if raw.get(name)]
    if len(sources) > 1:
        found.append(Problem("blueque.E003",
                             f"BLUEQUE names its Redis more than once: {' and '.join(sources)}.",
                             "Give exactly one of URL, CACHE or SENTINELS."))
    url = raw.get("URL")
    if url is not None and (not isinstance(url, str) or
                            not url.startswith(("redis://", "rediss://", "unix://"))):
        shown = repr(masked_url(url)) if isinstance(url, str) else f"a {type(url).__name__}"
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
    found += _policy_problems(raw, "BLUEQUE")
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
            elif not isinstance(policy, dict) or set(policy) - set(POLICY_KEYS):
                found.append(Problem("blueque.E010", f"{where} must be a dict with keys among "
                                     f"{', '.join(POLICY_KEYS)}.", f"Got {policy!r}."))
            else:
                found += _policy_problems(policy, where)
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


@dataclass(frozen=True)
class Settings:
    """The validated setting. Policy values are seconds (None: no limit / keep forever)."""

    url: str | None
    cache: str | None
    options: dict[str, Any]  # redis-py connection options
    sentinels: list[tuple[str, int]] | None
    service_name: str | None
    sentinel_options: dict[str, Any]
    cluster: bool
    prefix: str
    retries: int
    backoff: float
    timeout: float | None
    retention: float | None
    queues: dict[str, dict[str, float | None]] = field(default_factory=dict)
    eager: bool = False
    concurrency: int = 1
    kill_grace: float = 10
    scheduler_interval: float = 1.0
    reaper_interval: float = 5.0
    metrics_token: str | None = None
    api_tokens: dict[str, str] = field(default_factory=dict)
    wait_replicas: int = 0
    wait_timeout: float = 1.0

    def policy(self, queue: str) -> dict[str, float | None]:
        """{'retries', 'backoff', 'timeout', 'retention'} for a queue: its QUEUES entry over
        the global defaults."""
        override = self.queues.get(queue, {})
        return {name.lower(): override.get(name, getattr(self, name.lower()))
                for name in POLICY_KEYS}


@cache
def get_settings() -> Settings:
    found = problems()
    if found:
        raise ImproperlyConfigured("; ".join(f"{p.id}: {p.msg}" for p in found))
    raw = {**DEFAULTS, **getattr(django_settings, "BLUEQUE", {})}
    if not (raw["URL"] or raw["CACHE"] or raw["SENTINELS"]):
        raw["URL"] = DEFAULT_URL
    return Settings(
        url=raw["URL"], cache=raw["CACHE"], options=dict(raw["OPTIONS"]),
        sentinels=raw["SENTINELS"], service_name=raw["SERVICE_NAME"],
        sentinel_options=dict(raw["SENTINEL_OPTIONS"]), cluster=raw["CLUSTER"],
        prefix=raw["PREFIX"],
        retries=raw["RETRIES"], backoff=raw["BACKOFF"], timeout=raw["TIMEOUT"],
        retention=raw["RETENTION"], queues=dict(raw["QUEUES"]), eager=raw["EAGER"],
        concurrency=raw["CONCURRENCY"], kill_grace=raw["KILL_GRACE"],
        scheduler_interval=raw["SCHEDULER_INTERVAL"], reaper_interval=raw["REAPER_INTERVAL"],
        metrics_token=raw["METRICS_TOKEN"], api_tokens=dict(raw["API_TOKENS"]),
        wait_replicas=raw["WAIT_REPLICAS"],
        wait_timeout=raw["WAIT_TIMEOUT"])


class _Acknowledgement(TypedDict):
    wait_replicas: int
    wait_timeout: float


@cache
def get_client() -> Client:
    """The engine Client for the configured Redis (one per process; redis-py's pool is safe
    across fork)."""
    conf = get_settings()
    acknowledgement: _Acknowledgement = {"wait_replicas": conf.wait_replicas,
                                         "wait_timeout": conf.wait_timeout}
    if conf.cache:
        from django_redis import get_redis_connection

        return Client(redis_client=get_redis_connection(conf.cache), prefix=conf.prefix,
                      **acknowledgement)
    if conf.sentinels:
        # problems() requires SERVICE_NAME with SENTINELS
        service_name = cast(str, conf.service_name)
        return Client(redis_client=sentinel_redis(conf.sentinels, service_name,
                                                  conf.sentinel_options, **conf.options),
                      prefix=conf.prefix, **acknowledgement)
    if conf.cluster:
        return Client(conf.url, prefix=conf.prefix, cluster=True, **conf.options)
    return Client(conf.url, prefix=conf.prefix, **acknowledgement, **conf.options)


@receiver(setting_changed)
def _reset(setting: str, **kwargs: Any) -> None:
    if setting in ("BLUEQUE", "CACHES"):
        get_settings.cache_clear()
        get_client.cache_clear()
