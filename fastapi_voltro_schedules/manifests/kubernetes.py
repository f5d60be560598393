"""Kubernetes: one hardened ``batch/v1`` CronJob per external schedule. Pure: data in, dicts out.

Each field and why it has its value:

* ``schedule`` — the expression rewritten for robfig/cron (:func:`.dialects.kubernetes_cron`),
  ``timeZone`` — the schedule's IANA zone (a ``CRON_TZ=`` prefix is rejected by the API server
  since 1.27 and was never ours to use).
* ``concurrencyPolicy`` — from the schedule's ``on_overlap`` (:func:`concurrency_policy`), the
  reason written beside it in the ``voltro.dev/concurrency-policy-reason`` annotation (a YAML
  comment would not survive ``kubectl apply``; an annotation shows in ``kubectl describe``).
  A Job lives as long as it follows its run, so "a Job is active" means "a run is live":

  - ``skip`` → ``Forbid``: the controller starts no Job while the previous one still follows its
    run, as the app would stand the firing down. The dropped occurrence never reaches the app:
    the external missed policy records it ``missed``, not ``skipped`` — unless the previous Job
    ends within ``startingDeadlineSeconds`` of it, when the controller starts it late and it
    runs. ``Allow`` would record ``skipped``, but the script exits 1 on any run that did not
    succeed, so every skipped overlap would be a failed Job.
  - ``parallel`` → ``Allow``: every firing must reach the app, which runs it beside the run in
    flight.
  - ``queue`` → ``Allow``: the app holds the overlapping firing in its durable line and runs it
    when the run ahead ends; its Job is answered ``accepted`` with the ``queued`` run's id and
    follows it through the wait.

  ``Forbid`` would make the controller drop a ``parallel`` or ``queue`` firing (the app then
  records it ``missed``); ``Replace`` would kill the Job following the earlier run (the run goes
  on in the app, but its Job fails). Under ``Allow`` no Job outlives ``activeDeadlineSeconds``,
  which bounds how many are alive at once.
* ``startingDeadlineSeconds`` — half the app's skew budget (at least 10 s, the controller's
  sync period): a firing the controller could not start in time is dropped, not started when
  the app may already have recorded the slot ``missed``; the other half is for the pod to
  pull and start.
* history limits 3/3 and ``ttlSecondsAfterFinished`` one day — failures stay readable.
* ``backoffLimit: 2`` — a pod retried after a network failure restates the same slot, so it is
  a duplicate that follows the same run, never a second run.
* ``activeDeadlineSeconds`` — the schedule's ``max_runtime_ms`` plus :data:`POLL_SLACK_SECONDS`
  — the app's watchdog ends the run first; this only stops a Job that lost the app. Under
  ``on_overlap="queue"`` twice ``max_runtime_ms`` plus the slack (:func:`active_deadline_seconds`):
  a queued Job first waits for the run ahead of it, which the watchdog ends within one
  ``max_runtime_ms``. A firing further back in a longer line can outlive it: its Job then fails
  ``DeadlineExceeded`` while the app still runs the firing in its turn — the ledger has the
  outcome. (Covering any depth would mean no deadline, and a Job per firing piling up behind a
  schedule whose runs outlast its period.)
* ``restartPolicy: Never``, ``automountServiceAccountToken: false``, ``enableServiceLinks:
  false``, a non-root read-only container with every capability dropped and the runtime's
  seccomp profile, 10m/16Mi requested and 100m/32Mi at most — the pod only runs ``curl``.
* the token from a Secret (``secretKeyRef``), never inline; the Job name from the downward API
  (``metadata.labels['batch.kubernetes.io/job-name']``) so the script states the slot
  (:mod:`.script`).
* ``suspend: false`` written out: ``kubectl patch cronjob NAME -p '{"spec":{"suspend":true}}'``
  is the Kubernetes pause (the app then records the slots ``missed`` under the external missed
  policy); the app's own pause (``POST /_voltro/inspect/schedules/{name}/pause``) records
  nothing and answers the CronJob ``paused``.
"""

from __future__ import annotations

import math
from typing import Any

from ..enums import OverlapPolicy
from .dialects import kubernetes_cron
from .names import dns_name
from .script import TRIGGER_SCRIPT
from .targets import ManifestOptions, Target

__all__ = [
    "ANNOTATION_CONCURRENCY_REASON",
    "ANNOTATION_CRON",
    "ANNOTATION_NAME",
    "ANNOTATION_TIMEZONE",
    "JOB_NAME_FIELD",
    "POLL_SLACK_SECONDS",
    "active_deadline_seconds",
    "concurrency_policy",
    "cronjob",
    "starting_deadline_seconds",
]

POLL_SLACK_SECONDS = 180
"""Added to ``max_runtime_ms`` for ``activeDeadlineSeconds``: pod start, polling, retries."""
JOB_NAME_FIELD = "metadata.labels['batch.kubernetes.io/job-name']"
"""The downward-API field holding the Job's name (the label the Job controller sets on its
pods, 1.27+). The legacy ``job-name`` label holds the same value."""

ANNOTATION_NAME = "voltro.dev/schedule-name"
ANNOTATION_CRON = "voltro.dev/cron"
ANNOTATION_TIMEZONE = "voltro.dev/timezone"
ANNOTATION_DESCRIPTION = "voltro.dev/description"
ANNOTATION_CONCURRENCY_REASON = "voltro.dev/concurrency-policy-reason"
"""Why the CronJob's ``concurrencyPolicy`` is what it is (on the CronJob, not its pods)."""
LABEL_SCHEDULE = "voltro.dev/schedule"


def starting_deadline_seconds(skew_ms: int) -> int:
    """Half the skew budget, at least 10 s. Raises ``ValueError`` when the budget is too small
    for the controller to start a Job inside it."""
    skew_s = skew_ms // 1000
    if skew_s < 20:
        raise ValueError(
            f"external_trigger_skew_ms={skew_ms} leaves no room for a CronJob: the controller "
            "syncs every 10 s and the pod needs time to start — set VOLTRO_EXTERNAL_TRIGGER_"
            "SKEW_MS to 20000 or more"
        )
    return max(10, skew_s // 2)


_CONCURRENCY: dict[OverlapPolicy, tuple[str, str]] = {
    OverlapPolicy.SKIP: (
        "Forbid",
        "no Job starts while the previous one still follows its run, as the app would stand "
        "the firing down; the dropped occurrence is recorded missed, or runs if the previous "
        "Job ends within startingDeadlineSeconds",
    ),
    OverlapPolicy.PARALLEL: (
        "Allow",
        "every firing must reach the app, which runs it beside the run in flight; Forbid "
        "would drop it (recorded missed), Replace would kill the Job following the earlier run",
    ),
    OverlapPolicy.QUEUE: (
        "Allow",
        "the app holds an overlapping firing in its durable line and runs it when the run "
        "ahead ends, its Job following it meanwhile; Forbid would drop it (recorded missed), "
        "Replace would kill the Job following the earlier run",
    ),
}


def concurrency_policy(overlap: OverlapPolicy) -> tuple[str, str]:
    """The CronJob's ``concurrencyPolicy`` for a schedule's ``on_overlap``, and why (the text
    of :data:`ANNOTATION_CONCURRENCY_REASON`)."""
    policy, why = _CONCURRENCY[overlap]
    return policy, f"on_overlap={overlap.value}: {policy} — {why}"


def active_deadline_seconds(target: Target) -> int:
    """``max_runtime_ms`` plus :data:`POLL_SLACK_SECONDS`; under ``on_overlap="queue"`` one more
    ``max_runtime_ms``, for the wait behind the run in flight."""
    runtime = math.ceil(target.max_runtime_ms / 1000)
    runs = 2 if target.on_overlap is OverlapPolicy.QUEUE else 1
    return runs * runtime + POLL_SLACK_SECONDS


def _labels(target: Target, name: str, options: ManifestOptions) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "voltro-schedule-trigger",
        "app.kubernetes.io/part-of": options.app_name,
        "app.kubernetes.io/component": "schedule-trigger",
        "app.kubernetes.io/managed-by": "voltro-schedule-manifest",
        LABEL_SCHEDULE: name,
    }


def cronjob(target: Target, options: ManifestOptions) -> dict[str, Any]:
    """The CronJob of one schedule. Raises
    :class:`~.dialects.UntranslatableCronError` when robfig/cron cannot say the cron."""
    name = dns_name(target.name)
    schedule = kubernetes_cron(target.spec)
    labels = _labels(target, name, options)
    annotations = {
        ANNOTATION_NAME: target.name,
        ANNOTATION_CRON: target.cron,
        ANNOTATION_TIMEZONE: target.timezone,
    }
    if target.description:
        annotations[ANNOTATION_DESCRIPTION] = target.description
    policy, why = concurrency_policy(target.on_overlap)
    metadata: dict[str, Any] = {"name": name}
    if options.namespace:
        metadata["namespace"] = options.namespace
    metadata["labels"] = labels
    metadata["annotations"] = {**annotations, ANNOTATION_CONCURRENCY_REASON: why}
    env: list[dict[str, Any]] = [
        {"name": "VOLTRO_SCHEDULE", "value": target.name},
        {"name": "VOLTRO_TRIGGER_URL", "value": options.trigger_url(target.name)},
        {"name": "VOLTRO_RUNS_URL", "value": options.runs_url},
        {"name": "VOLTRO_CRONJOB", "value": name},
        {"name": "VOLTRO_JOB_NAME", "valueFrom": {"fieldRef": {"fieldPath": JOB_NAME_FIELD}}},
        {"name": "VOLTRO_POLL_SECONDS", "value": "5"},
        {
            "name": "VOLTRO_SCHEDULE_TRIGGER_TOKEN",
            "valueFrom": {"secretKeyRef": {"name": options.secret_name, "key": options.secret_key}},
        },
    ]
    container: dict[str, Any] = {
        "name": "trigger",
        "image": options.image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["/bin/sh", "-c"],
        "args": [TRIGGER_SCRIPT],
        "env": env,
        "resources": {
            "requests": {"cpu": "10m", "memory": "16Mi"},
            "limits": {"cpu": "100m", "memory": "32Mi"},
        },
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "privileged": False,
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "capabilities": {"drop": ["ALL"]},
        },
    }
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": 10,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": 100,
            "runAsGroup": 101,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [container],
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": metadata,
        "spec": {
            "schedule": schedule,
            "timeZone": target.timezone,
            "concurrencyPolicy": policy,
            "startingDeadlineSeconds": starting_deadline_seconds(options.skew_ms),
            "successfulJobsHistoryLimit": 3,
            "failedJobsHistoryLimit": 3,
            "suspend": False,
            "jobTemplate": {
                "metadata": {"labels": labels},
                "spec": {
                    "backoffLimit": 2,
                    "activeDeadlineSeconds": active_deadline_seconds(target),
                    "ttlSecondsAfterFinished": 86_400,
                    "template": {
                        "metadata": {"labels": labels, "annotations": dict(annotations)},
                        "spec": pod_spec,
                    },
                },
            },
        },
    }
