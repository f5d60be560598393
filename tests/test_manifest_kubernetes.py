"""The generated Kubernetes objects: valid against the API schema (kubernetes-validate, strict),
our policy values, names, no inline token, deterministic output; the drift check."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from support.servers import REPO

from fastapi_voltro_schedules import OverlapPolicy, ScheduleContext, Scheduling, define_schedule
from fastapi_voltro_schedules.manifests import (
    ManifestError,
    ManifestOptions,
    Provider,
    render,
    targets_of,
)
from fastapi_voltro_schedules.manifests.check import check_cronjobs, read_manifests
from fastapi_voltro_schedules.manifests.kubernetes import (
    ANNOTATION_CONCURRENCY_REASON,
    POLL_SLACK_SECONDS,
)
from fastapi_voltro_schedules.manifests.names import dns_name

sys.path.insert(0, str(REPO / "tests"))
from apps import manifest_app

K8S_VERSION = "1.37.0"
"""The newest schema kubernetes-validate bundles (CronJob.spec.timeZone is GA since 1.27)."""

OPTIONS = ManifestOptions(
    base_url="http://api.prod.svc:8000",
    app_name="manifest-app",
    skew_ms=300_000,
    namespace="prod",
)


def cronjobs() -> list[dict[str, Any]]:
    files = render(Provider.KUBERNETES, targets_of(manifest_app.scheduling), OPTIONS)
    return [d for f in files for d in yaml.safe_load_all(f.text) if d]


async def _noop(ctx: ScheduleContext) -> None:
    pass


OVERLAP_RUNTIME_MS = 600_000


def overlap_cronjob(overlap: OverlapPolicy) -> dict[str, Any]:
    """The CronJob of an external schedule with ``on_overlap=overlap``, through the generator
    (``targets_of`` → ``render`` → YAML) like the CLI's."""
    scheduling = Scheduling(
        [
            define_schedule(
                name=f"{overlap.value}Overlap",
                cron="*/5 * * * *",
                timezone="UTC",
                trigger="external",
                handler=_noop,
                on_overlap=overlap,
                max_runtime_ms=OVERLAP_RUNTIME_MS,
            )
        ]
    )
    (file,) = render(Provider.KUBERNETES, targets_of(scheduling), OPTIONS)
    (obj,) = [d for d in yaml.safe_load_all(file.text) if d]
    return obj


def voltro(*args: str, cwd: Path = REPO / "tests") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fastapi_voltro_schedules", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{REPO}:{REPO / 'tests'}"},
    )


def test_the_bundled_schema_has_cronjob_timezone() -> None:
    assert K8S_VERSION in kubernetes_validate.utils.all_versions()


@pytest.mark.parametrize(
    "obj",
    [*cronjobs(), *(overlap_cronjob(o) for o in OverlapPolicy)],
    ids=lambda o: o["metadata"]["name"],
)
def test_every_cronjob_passes_strict_validation(obj: dict[str, Any]) -> None:
    kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def test_strict_validation_catches_a_misspelled_field() -> None:
    obj = cronjobs()[0]
    obj["spec"]["concurrencyPolicyy"] = "Forbid"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def test_policy_values() -> None:
    for obj in cronjobs():
        spec = obj["spec"]
        assert spec["concurrencyPolicy"] == "Forbid"  # every schedule of the app is on_overlap=skip
        assert 10 <= spec["startingDeadlineSeconds"] <= OPTIONS.skew_ms // 1000
        assert spec["suspend"] is False
        assert spec["successfulJobsHistoryLimit"] >= 1 and spec["failedJobsHistoryLimit"] >= 1
        job = spec["jobTemplate"]["spec"]
        assert 0 < job["backoffLimit"] <= 3
        assert job["ttlSecondsAfterFinished"] > 0
        name = obj["metadata"]["annotations"]["voltro.dev/schedule-name"]
        schedule = manifest_app.scheduling.get(name)
        assert schedule is not None
        assert job["activeDeadlineSeconds"] >= schedule.max_runtime_ms / 1000 + 60
        pod = job["template"]["spec"]
        assert pod["restartPolicy"] == "Never"
        assert pod["automountServiceAccountToken"] is False
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        (container,) = pod["containers"]
        sc = container["securityContext"]
        assert sc["allowPrivilegeEscalation"] is False and sc["readOnlyRootFilesystem"] is True
        assert sc["capabilities"] == {"drop": ["ALL"]}
        assert set(container["resources"]) == {"requests", "limits"}
        assert spec["timeZone"] == schedule.timezone
        assert "TZ" not in spec["schedule"]
        labels = obj["metadata"]["labels"]
        assert labels["app.kubernetes.io/part-of"] == "manifest-app"
        assert labels["voltro.dev/schedule"] == obj["metadata"]["name"]
        token = next(e for e in container["env"] if e["name"] == "VOLTRO_SCHEDULE_TRIGGER_TOKEN")
        assert "value" not in token
        assert token["valueFrom"]["secretKeyRef"] == {
            "name": "voltro-schedule-trigger",
            "key": "token",
        }


@pytest.mark.parametrize(
    ("overlap", "policy"),
    [
        (OverlapPolicy.SKIP, "Forbid"),
        (OverlapPolicy.PARALLEL, "Allow"),
        (OverlapPolicy.QUEUE, "Allow"),
    ],
)
def test_the_concurrency_policy_follows_on_overlap_and_says_why(
    overlap: OverlapPolicy, policy: str
) -> None:
    obj = overlap_cronjob(overlap)
    assert obj["spec"]["concurrencyPolicy"] == policy
    reason = obj["metadata"]["annotations"][ANNOTATION_CONCURRENCY_REASON]
    assert reason.startswith(f"on_overlap={overlap.value}: {policy} ")
    # the CronJob's policy, not the pod's: the reason is on the CronJob only
    pod_annotations = obj["spec"]["jobTemplate"]["spec"]["template"]["metadata"]["annotations"]
    assert ANNOTATION_CONCURRENCY_REASON not in pod_annotations


def test_parallel_and_queue_firings_reach_the_app() -> None:
    """Forbid would have the controller drop an overlapping firing (the app records it
    ``missed``) and Replace would kill the Job following the run in flight."""
    for overlap in (OverlapPolicy.PARALLEL, OverlapPolicy.QUEUE):
        obj = overlap_cronjob(overlap)
        assert obj["spec"]["concurrencyPolicy"] not in ("Forbid", "Replace")
        assert "missed" in obj["metadata"]["annotations"][ANNOTATION_CONCURRENCY_REASON]


def test_a_queued_jobs_deadline_covers_its_wait_behind_the_run_in_flight() -> None:
    runtime_s = OVERLAP_RUNTIME_MS // 1000
    deadline = {
        o: overlap_cronjob(o)["spec"]["jobTemplate"]["spec"]["activeDeadlineSeconds"]
        for o in OverlapPolicy
    }
    assert deadline[OverlapPolicy.SKIP] == runtime_s + POLL_SLACK_SECONDS
    assert deadline[OverlapPolicy.PARALLEL] == runtime_s + POLL_SLACK_SECONDS
    # a queued firing waits up to one max_runtime for the run ahead, then runs its own
    assert deadline[OverlapPolicy.QUEUE] == 2 * runtime_s + POLL_SLACK_SECONDS


def test_the_description_is_an_annotation() -> None:
    hourly = next(o for o in cronjobs() if o["metadata"]["name"] == "hourly")
    assert hourly["metadata"]["annotations"]["voltro.dev/description"] == "Every hour, on the hour"


def test_names_are_dns_safe_bounded_and_deterministic() -> None:
    names = [o["metadata"]["name"] for o in cronjobs()]
    for name in names:
        assert len(name) <= 52
        assert name == name.lower()
        assert (
            all(c.isalnum() or c == "-" for c in name) and name[0].isalnum() and name[-1].isalnum()
        )
    long = dns_name("aVeryLongScheduleNameThatCannotFitIntoAKubernetesCronJobName")
    assert long in names and len(long) == 52
    assert long == dns_name("aVeryLongScheduleNameThatCannotFitIntoAKubernetesCronJobName")
    assert long != dns_name("aVeryLongScheduleNameThatCannotFitIntoAKubernetesCronJobNameToo")
    assert dns_name("berlinWeekday") == "berlin-weekday"


def test_dialect_rewrites_in_the_manifest() -> None:
    by_name = {o["metadata"]["annotations"]["voltro.dev/schedule-name"]: o for o in cronjobs()}
    assert by_name["sundayReport"]["spec"]["schedule"] == "0 6 * * 0"  # robfig rejects 7
    assert by_name["oddWeekdays"]["spec"]["schedule"] == "0 8 * * 0,1,3,5"  # 1/2 + Sunday


def test_the_cli_output_is_deterministic_and_holds_no_token(tmp_path: Path) -> None:
    args = (
        "schedule-manifest",
        "--app",
        "apps.manifest_app:app",
        "--provider",
        "kubernetes",
        "--base-url",
        "http://api:8000",
    )
    one, two = voltro(*args), voltro(*args)
    assert one.returncode == 0, one.stderr
    assert one.stdout == two.stdout
    assert "not-a-real-secret" not in one.stdout
    out = voltro(*args, "--out", str(tmp_path / "k8s"))
    assert out.returncode == 0, out.stderr
    written = sorted(p.name for p in (tmp_path / "k8s").iterdir())
    assert written == sorted(
        f"{dns_name(t.name)}.yaml" for t in targets_of(manifest_app.scheduling)
    )
    assert "".join((tmp_path / "k8s" / n).read_text() for n in written) == one.stdout


def test_an_untranslatable_cron_is_refused_naming_it(tmp_path: Path) -> None:
    (tmp_path / "andapp.py").write_text(
        "from fastapi_voltro_schedules import Scheduling, define_schedule\n"
        "async def h(ctx): pass\n"
        "scheduling = Scheduling([define_schedule(name='oddMondays', cron='0 9 */2 * 1',"
        " timezone='UTC', trigger='external', handler=h)])\n"
    )
    done = voltro(
        "schedule-manifest",
        "--app",
        "andapp:scheduling",
        "--provider",
        "kubernetes",
        "--base-url",
        "http://api:8000",
        cwd=tmp_path,
    )
    assert done.returncode == 1
    assert 'schedule "oddMondays"' in done.stderr and "robfig" in done.stderr
    assert done.stdout == ""


def test_a_calendar_cron_is_refused_naming_the_schedule_and_the_ways_to_keep_it() -> None:
    """Issue 36: L, W and # exist only in EventBridge's dialect. Every other provider refuses
    the whole manifest, naming the schedule and offering the in-app and hybrid ways."""
    scheduling = Scheduling(
        [
            define_schedule(name="monthEnd", cron="0 2 L * *", timezone="Europe/Berlin",
                            trigger="external", handler=_noop),
            define_schedule(name="secondMonday", cron="0 9 * * MON#2", timezone="UTC",
                            trigger="external", handler=_noop),
        ]
    )  # fmt: skip
    for provider in (Provider.KUBERNETES, Provider.GCP, Provider.AZURE, Provider.GENERIC):
        with pytest.raises(ManifestError) as info:
            render(provider, targets_of(scheduling), OPTIONS)
        message = str(info.value)
        assert 'schedule "monthEnd": cron "0 2 L * *" uses a calendar term' in message, provider
        assert 'schedule "secondMonday": cron "0 9 * * MON#2"' in message, provider
        assert 'trigger="self"' in message and 'fallback="self"' in message, provider
    (template,) = render(Provider.AWS, targets_of(scheduling), OPTIONS)
    assert "cron(0 2 L * ? *)" in template.text
    assert "cron(0 9 ? * 2#2 *)" in template.text


# ------------------------------------------------------------------ --check


def test_check_in_sync_and_after_a_hand_edit(tmp_path: Path) -> None:
    out = tmp_path / "deployed"
    assert (
        voltro(
            "schedule-manifest",
            "--app",
            "apps.manifest_app:app",
            "--provider",
            "kubernetes",
            "--base-url",
            "http://api:8000",
            "--out",
            str(out),
        ).returncode
        == 0
    )
    ok = voltro("schedule-manifest", "--app", "apps.manifest_app:app", "--check", str(out))
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "in sync" in ok.stdout
    # hand edits: a cadence, a zone, a deleted CronJob, an extra one of ours
    hourly = out / "hourly.yaml"
    hourly.write_text(hourly.read_text().replace("schedule: 0 * * * *", "schedule: 5 * * * *"))
    ny = out / "nightly-new-york.yaml"
    ny.write_text(ny.read_text().replace("timeZone: America/New_York", "timeZone: UTC"))
    (out / "failing.yaml").unlink()
    extra = yaml.safe_load((out / "odd-weekdays.yaml").read_text())
    extra["metadata"]["name"] = "retired-job"
    extra["metadata"]["annotations"]["voltro.dev/schedule-name"] = "retiredJob"
    (out / "extra.yml").write_text(yaml.safe_dump(extra))
    bad = voltro("schedule-manifest", "--app", "apps.manifest_app:app", "--check", str(out))
    assert bad.returncode == 1
    assert 'schedule "hourly": cadence differs: deployed schedule "5 * * * *"' in bad.stdout
    assert 'schedule "nightlyNewYork": zone differs' in bad.stdout
    assert 'schedule "failing": no CronJob' in bad.stdout
    assert 'schedule "retiredJob": CronJob retired-job is deployed' in bad.stdout
    assert bad.stdout.count("drift:") == 4


def test_check_reads_the_kubectl_list_form(tmp_path: Path) -> None:
    items = cronjobs()
    items[0]["spec"]["schedule"] = "1 2 3 4 5"
    listing = {"apiVersion": "v1", "kind": "List", "items": items, "metadata": {}}
    path = tmp_path / "cronjobs.yaml"
    path.write_text(yaml.safe_dump(listing))
    drifts = check_cronjobs(targets_of(manifest_app.scheduling), read_manifests(path))
    assert [d.schedule for d in drifts] == [
        items[0]["metadata"]["annotations"]["voltro.dev/schedule-name"]
    ]


def test_check_refuses_a_missing_path_and_bad_yaml(tmp_path: Path) -> None:
    missing = voltro(
        "schedule-manifest", "--app", "apps.manifest_app:app", "--check", str(tmp_path / "nope")
    )
    assert missing.returncode == 1 and "no such file" in missing.stderr
    (tmp_path / "bad.yaml").write_text("a: [unclosed\n")
    bad = voltro(
        "schedule-manifest", "--app", "apps.manifest_app:app", "--check", str(tmp_path / "bad.yaml")
    )
    assert bad.returncode == 1 and "bad.yaml: not YAML" in bad.stderr
