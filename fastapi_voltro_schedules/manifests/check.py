"""The drift check: deployed CronJobs against the app's external schedules. Pure.

A CronJob is the app's when it carries the ``voltro.dev/schedule-name`` annotation (every
generated one does), or — hand-made ones — when its name is the one the generator would give a
schedule. Cadence is compared with what the generator writes (:func:`.dialects.kubernetes_cron`),
field by field after whitespace is normalised, because a deployed expression is read by
robfig/cron, not by us: ``1/2`` in the day-of-week field means something else there, so only
the generated spelling is known to mean what the app means.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .dialects import UntranslatableCronError, kubernetes_cron
from .kubernetes import ANNOTATION_NAME
from .names import dns_name
from .targets import Target
from .yaml_io import load_objects

__all__ = ["Drift", "check_cronjobs", "read_manifests"]

_SUFFIXES = (".yaml", ".yml", ".json")


@dataclass(frozen=True, slots=True)
class Drift:
    schedule: str
    problem: str

    def __str__(self) -> str:
        return f'schedule "{self.schedule}": {self.problem}'


def read_manifests(path: Path) -> list[dict[str, Any]]:
    """Every object in ``path`` (a file, or every ``*.yaml``/``*.yml``/``*.json`` under a
    directory, in sorted order). Raises ``ValueError`` naming the file that does not parse, and
    ``FileNotFoundError`` for a missing path."""
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file or directory")
    files = (
        [path]
        if path.is_file()
        else sorted(
            Path(root) / name
            for root, _, names in os.walk(path)
            for name in names
            if name.endswith(_SUFFIXES)
        )
    )
    objects: list[dict[str, Any]] = []
    for file in files:
        objects.extend(load_objects(file.read_text(), str(file)))
    return objects


def _schedule_of(obj: dict[str, Any], by_k8s_name: dict[str, str]) -> str | None:
    metadata = obj.get("metadata") or {}
    annotated = (metadata.get("annotations") or {}).get(ANNOTATION_NAME)
    if isinstance(annotated, str):
        return annotated
    name = metadata.get("name")
    return by_k8s_name.get(name) if isinstance(name, str) else None


def check_cronjobs(targets: list[Target], objects: list[dict[str, Any]]) -> list[Drift]:
    """Every difference: a schedule whose CronJob has another cadence or zone, a schedule with
    no CronJob, a CronJob of the app for no external schedule, a schedule deployed twice.
    Empty when in sync."""
    by_name = {t.name: t for t in targets}
    by_k8s_name = {dns_name(t.name): t.name for t in targets}
    found: dict[str, list[dict[str, Any]]] = {}
    drifts: list[Drift] = []
    for obj in objects:
        if obj.get("kind") != "CronJob":
            continue
        schedule = _schedule_of(obj, by_k8s_name)
        if schedule is None:
            continue
        if schedule not in by_name:
            name = (obj.get("metadata") or {}).get("name")
            drifts.append(
                Drift(
                    schedule,
                    f"CronJob {name} is deployed, but the app has no external schedule of that "
                    "name — delete it (kubectl delete cronjob …) or restore the schedule",
                )
            )
            continue
        found.setdefault(schedule, []).append(obj)
    for target in targets:
        deployed = found.get(target.name)
        if not deployed:
            drifts.append(Drift(target.name, f"no CronJob — apply {dns_name(target.name)}.yaml"))
            continue
        if len(deployed) > 1:
            names = ", ".join(str((o.get("metadata") or {}).get("name")) for o in deployed)
            drifts.append(
                Drift(target.name, f"deployed {len(deployed)} times ({names}) — keep one")
            )
        try:
            expected = kubernetes_cron(target.spec)
        except UntranslatableCronError as exc:
            drifts.append(Drift(target.name, str(exc)))
            continue
        for obj in deployed:
            spec = obj.get("spec") or {}
            schedule = " ".join(str(spec.get("schedule", "")).split())
            if schedule != expected:
                drifts.append(
                    Drift(
                        target.name,
                        f'cadence differs: deployed schedule "{schedule}", the app\'s cron '
                        f'"{target.cron}" is "{expected}" in Kubernetes',
                    )
                )
            zone = spec.get("timeZone")
            if zone != target.timezone:
                drifts.append(
                    Drift(
                        target.name,
                        f"zone differs: deployed timeZone {zone!r}, the app's is "
                        f"{target.timezone!r}",
                    )
                )
    return drifts
