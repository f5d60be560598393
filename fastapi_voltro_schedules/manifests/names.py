"""Object names for the platforms: DNS-safe, lowercase, bounded, deterministic.

A CronJob's name is at most 52 characters: the controller names each Job
``<cronjob>-<minutes since the epoch>`` and a Job name (a label value) holds at most 63. A
schedule name that does not fit after slugging keeps a readable prefix and gains a hash of the
whole name, so two long names sharing a prefix never collide and a rerun gives the same name.
"""

from __future__ import annotations

import hashlib
import re

__all__ = ["KUBERNETES_NAME_MAX", "dns_name"]

KUBERNETES_NAME_MAX = 52
"""CronJob name limit (63 for the Job name minus the controller's ``-<minutes>`` suffix)."""

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_NOT_DNS = re.compile(r"[^a-z0-9]+")


def dns_name(name: str, *, prefix: str = "", limit: int = KUBERNETES_NAME_MAX) -> str:
    """``prefix`` + the schedule ``name`` as an RFC 1123 label: camelCase → kebab-case, every
    other character run → ``-``, at most ``limit`` characters (a truncated one ends with
    ``-`` + 8 hex digits of the SHA-256 of ``name``)."""
    slug = _NOT_DNS.sub("-", _CAMEL.sub("-", name).lower()).strip("-")
    full = f"{prefix}{slug}".strip("-") or "schedule"
    if len(full) <= limit:
        return full
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{full[: limit - 9].rstrip('-')}-{digest}"
