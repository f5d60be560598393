"""Healthchecks.io-style ping URLs: ``<url>/start`` when a slot's run starts, ``<url>`` when it
succeeds, ``<url>/fail`` when it fails or nobody ran the slot.

Every ping carries ``?rid=<uuid>`` (the run's check-in id), so the service pairs a run's start
with its end even when runs overlap, and times it. A failure's ping has the error as its body
(the service keeps it as the ping's log). The protocol is Healthchecks.io's; self-hosted
Healthchecks and the services that copy its URLs (Cronitor's, a pinger of your own) speak it
too.

A ping URL is a secret (anyone holding it can ping the check): logs name its host only.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from ..enums import Trigger
from ..errors import ConfigurationError, shown
from .base import DEFAULT_TRIGGERS, CheckIn, CheckInError, CheckInStatus, Monitor

if TYPE_CHECKING:
    import httpx

__all__ = ["HealthchecksMonitor"]

BODY_LIMIT = 10_000
"""Characters of a failure's message sent as the ping's body (Healthchecks keeps 100 kB)."""

_SUFFIX = {
    CheckInStatus.IN_PROGRESS: "/start",
    CheckInStatus.OK: "",
    CheckInStatus.ERROR: "/fail",
    CheckInStatus.MISSED: "/fail",
}


def host_of(url: str) -> str:
    """The host of ``url`` (what a log may show of a ping URL), or ``?`` when it has none."""
    try:
        return urlsplit(url).hostname or "?"
    except ValueError:
        return "?"


def _check_url(url: object, name: str) -> str:
    """``url`` if it is an absolute http(s) URL; a :class:`ConfigurationError` naming the
    schedule (not the URL: it is a secret) otherwise."""
    if isinstance(url, str):
        try:
            scheme = urlsplit(url).scheme
        except ValueError:  # an unclosed IPv6 bracket
            scheme = ""
        if scheme in ("http", "https") and host_of(url) != "?":
            return url
    raise ConfigurationError(
        f"HealthchecksMonitor: the ping URL of schedule {shown(name)} is not an absolute "
        f"http(s) URL ({type(url).__name__}) — give its check's ping URL, e.g. "
        "https://hc-ping.com/<uuid>"
    )


class HealthchecksMonitor(Monitor):
    """Ping a Healthchecks.io check per schedule.

    ``url_for``: the ping URL of each monitored schedule — a mapping (``{"nightly-export":
    "https://hc-ping.com/…"}``; schedules not in it are not monitored) or a function of the
    schedule's name returning its URL or ``None``. ``timeout``: seconds per ping.
    ``triggers``: which runs are pinged (default: the schedule's own cadence, not Run now or a
    range backfill).
    """

    def __init__(
        self,
        url_for: Callable[[str], str | None] | Mapping[str, str],
        *,
        timeout: float = 10.0,
        triggers: Iterable[Trigger] = DEFAULT_TRIGGERS,
    ) -> None:
        if isinstance(url_for, Mapping):
            urls = {name: _check_url(url, name) for name, url in url_for.items()}
            self._url_for: Callable[[str], str | None] = urls.get
            hosts = sorted({host_of(url) for url in urls.values()})
            self._label = f"healthchecks({', '.join(hosts)})"
        elif callable(url_for):
            self._url_for = url_for
            self._label = "healthchecks"
        else:
            raise ConfigurationError(
                "HealthchecksMonitor(url_for=...) must be a mapping of schedule name to ping "
                f"URL or a function of the name returning one, got {type(url_for).__name__}"
            )
        self.timeout = timeout
        self.triggers = frozenset(Trigger(t) for t in triggers)
        self._client: httpx.AsyncClient | None = None

    @property
    def label(self) -> str:
        return self._label

    def watches(self, name: str) -> bool:
        return self._url_for(name) is not None

    def ping_url(self, check_in: CheckIn) -> str | None:
        """Where ``check_in`` is sent: the schedule's URL, ``/start`` or ``/fail`` appended,
        ``rid`` set; ``None`` when the schedule has no URL."""
        url = self._url_for(check_in.name)
        if url is None:
            return None
        parts = urlsplit(_check_url(url, check_in.name))
        path = parts.path.rstrip("/") + _SUFFIX[check_in.status]
        query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != "rid"]
        query.append(("rid", str(uuid.UUID(hex=check_in.check_in_id))))
        return urlunsplit(parts._replace(path=path, query=urlencode(query)))

    async def send(self, check_in: CheckIn) -> None:
        url = self.ping_url(check_in)
        if url is None:
            return
        import httpx  # here, not at import: an app without this monitor never loads it

        host = host_of(url)
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=self.timeout, follow_redirects=True)
        try:
            response = await self._client.post(url, content=_body(check_in).encode())
        except httpx.TimeoutException:
            raise CheckInError(
                f"{host} did not answer within {self.timeout:g} s", retry=True
            ) from None
        except httpx.HTTPError as exc:
            # httpx's message may quote the URL: name the error's kind and the host only
            raise CheckInError(f"{host} unreachable ({type(exc).__name__})", retry=True) from None
        status = response.status_code
        if status >= 500 or status == 429:
            raise CheckInError(f"{host} answered {status}", retry=True)
        if status >= 400:
            raise CheckInError(
                f"{host} answered {status} — is the check's ping URL right?", retry=False
            )

    async def aclose(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()


def _body(check_in: CheckIn) -> str:
    slot = check_in.scheduled_at.isoformat()
    if check_in.status is CheckInStatus.MISSED:
        return f"{check_in.name}: slot {slot} missed — nobody ran it (run {check_in.run_id})"
    if check_in.status is CheckInStatus.ERROR:
        text = f"{check_in.name}: slot {slot} failed ({check_in.error_tag})"
        if check_in.error_message:
            text += f": {check_in.error_message}"
        return text[:BODY_LIMIT]
    return ""
