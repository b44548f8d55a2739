"""The ``BLUEQUE`` setting: read and defaulted here and nowhere else, and the engine client it
names.

Its keys and every mistake it can make are in setting_checks.py: a mistake is reported by
``manage.py check`` with an id and a hint, and raised here as ImproperlyConfigured at first use.
"""

from dataclasses import dataclass, field
from functools import cache
from typing import Any, TypedDict, cast

from django.apps import apps
from django.conf import settings as django_settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.dispatch import receiver

from .core import Client
from .core.connections import sentinel_redis
from .core.limits import cpu_seconds, memory_bytes
from .core.timings import Timings
from .redacted import masked_url
from .setting_checks import (
    ADMISSION_KEYS,
    DEFAULT_URL,
    DEFAULTS,
    LEASE_KEY,
    POLICY_KEYS,
    problems,
)


def using_default_redis() -> bool:
    """Whether the setting names no Redis, so that DEFAULT_URL is used."""
    raw = getattr(django_settings, "BLUEQUE", {})
    return not any(raw.get(name) for name in ("URL", "CACHE", "SENTINELS"))


def redis_in_use() -> str:
    """The Redis this process uses, as its first log line and its errors name it (password
    masked): a producer and a listener on different servers is otherwise hard to see."""
    conf = get_settings()
    if conf.cache:
        location = getattr(django_settings, "CACHES", {}).get(conf.cache, {}).get("LOCATION")
        shown = masked_url(location) if isinstance(location, str) else repr(location)
        return f"BLUEQUE['CACHE'] = {conf.cache!r} ({shown})"
    if conf.sentinels:
        return f"BLUEQUE['SENTINELS'] = {conf.sentinels!r}, service {conf.service_name!r}"
    if using_default_redis():
        why = ("settings.BLUEQUE is not set" if not hasattr(django_settings, "BLUEQUE")
               else "BLUEQUE has no URL")
        return f"{DEFAULT_URL} (the default: {why})"
    return f"BLUEQUE['URL'] = {masked_url(conf.url or DEFAULT_URL)}"


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
    queues: dict[str, dict[str, Any]] = field(default_factory=dict)
    memory_limit: str | int | None = None  # as given: see limits()
    cpu_limit: float | None = None
    eager: bool = False
    concurrency: int = 1
    kill_grace: float = 10
    scheduler_interval: float = 1.0
    reaper_interval: float = 5.0
    metrics_token: str | None = None
    api_tokens: dict[str, str] = field(default_factory=dict)
    wait_replicas: int = 0
    wait_timeout: float = 1.0
    timings: Timings = field(default_factory=Timings)

    def policy(self, queue: str) -> dict[str, float | None]:
        """{'retries', 'backoff', 'timeout', 'retention'} for a queue: its QUEUES entry over
        the global defaults."""
        override = self.queues.get(queue, {})
        return {name.lower(): override.get(name, getattr(self, name.lower()))
                for name in POLICY_KEYS}

    def admission(self, queue: str) -> dict[str, object]:
        """{'max_running', 'max_running_per_key', 'rate_limit'} of a queue (its QUEUES
        entry; None where it has no such limit)."""
        override = self.queues.get(queue, {})
        return {name.lower(): override.get(name) for name in ADMISSION_KEYS}

    def lease(self, queue: str) -> dict[str, float]:
        """{'lease': seconds} of a queue with a lease of its own (QUEUES' LEASE), else {}."""
        override = self.queues.get(queue, {})
        return {"lease": override[LEASE_KEY]} if LEASE_KEY in override else {}

    def limits(self, queue: str) -> dict[str, int]:
        """{'memory_limit': bytes, 'cpu_limit': seconds} of a queue's task processes (its
        QUEUES entry over the global settings), without those it has not."""
        override = self.queues.get(queue, {})
        memory = override.get("MEMORY_LIMIT", self.memory_limit)
        cpu = override.get("CPU_LIMIT", self.cpu_limit)
        return {**({"memory_limit": memory_bytes(memory)} if memory is not None else {}),
                **({"cpu_limit": cpu_seconds(cpu)} if cpu is not None else {})}


app_installed = False
"""Set by the app's ready(): django_blueque is in INSTALLED_APPS (a flag, not the app registry,
which a TransactionTestCase's ``available_apps`` narrows)."""


@cache
def get_settings() -> Settings:
    if apps.ready and not app_installed:
        # enqueueing would work and nothing ever run the task: bq_listen, the system checks
        # and the discovery of tasks.py modules all come with the app
        raise ImproperlyConfigured("'django_blueque' is not in INSTALLED_APPS: a task "
                                   "enqueued now would never run (bq_listen is the app's "
                                   "command). Add 'django_blueque' to INSTALLED_APPS.")
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
        memory_limit=raw["MEMORY_LIMIT"], cpu_limit=raw["CPU_LIMIT"],
        concurrency=raw["CONCURRENCY"], kill_grace=raw["KILL_GRACE"],
        scheduler_interval=raw["SCHEDULER_INTERVAL"], reaper_interval=raw["REAPER_INTERVAL"],
        metrics_token=raw["METRICS_TOKEN"], api_tokens=dict(raw["API_TOKENS"]),
        wait_replicas=raw["WAIT_REPLICAS"],
        wait_timeout=raw["WAIT_TIMEOUT"], timings=Timings.from_setting(raw["TIMINGS"]))


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
                      timings=conf.timings, **acknowledgement)
    if conf.sentinels:
        # problems() requires SERVICE_NAME with SENTINELS
        service_name = cast(str, conf.service_name)
        return Client(redis_client=sentinel_redis(conf.sentinels, service_name,
                                                  conf.sentinel_options, **conf.options),
                      prefix=conf.prefix, timings=conf.timings, **acknowledgement)
    if conf.cluster:
        return Client(conf.url, prefix=conf.prefix, cluster=True, timings=conf.timings,
                      **conf.options)
    return Client(conf.url, prefix=conf.prefix, timings=conf.timings, **acknowledgement,
                  **conf.options)


@receiver(setting_changed)
def _reset(setting: str, **kwargs: Any) -> None:
    if setting in ("BLUEQUE", "CACHES"):
        get_settings.cache_clear()
        get_client.cache_clear()
