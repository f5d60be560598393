"""``voltro schedule-manifest``: write the platform scheduler's manifests for the app's
``trigger="external"`` schedules, or check deployed ones for drift (``--check``).

The generators are pure (:mod:`fastapi_voltro_schedules.manifests`); this module imports the
app, reads its schedules and config, and writes stdout or ``--out``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..manifests import ManifestError, ManifestOptions, Provider, render, stdout_text, targets_of
from ..manifests.check import check_cronjobs, read_manifests
from ..manifests.names import dns_name
from ..manifests.targets import DEFAULT_IMAGE, DEFAULT_SECRET_NAME, Target, route_prefix
from .common import AppOption, CliError, app, find_scheduling

MANIFEST_HELP = (
    'Generate the platform scheduler\'s half of trigger="external": one job per external '
    "schedule that POSTs /_voltro/schedules/NAME/trigger and (kubernetes, generic, azure) "
    "follows the run to its outcome.\n\n"
    "kubernetes: one hardened batch/v1 CronJob per schedule (token from --secret-name, key "
    "'token'); aws: a CloudFormation template (EventBridge Scheduler → rule → API "
    "destination); gcp: gcloud scheduler jobs create http commands; azure: a timer-trigger "
    "Function App outline per zone; generic: a README with the curl script and the cron "
    "table. Each cron is rewritten in the platform's dialect; one it cannot express is "
    "refused with the reason, and nothing is written.\n\n"
    "Output is deterministic (it diffs well): stdout, or one file per object under --out.\n\n"
    "--check PATH reads deployed CronJobs (a file or a directory of YAML, multi-document or "
    "the List of `kubectl get cronjobs -o yaml`) and exits 1 naming every schedule whose "
    "cadence or zone differs, or that is missing or extra; 0 when in sync."
)


def _app_name(spec: str) -> str:
    return dns_name(spec.partition(":")[0].split(".")[0], limit=40)


@app.command("schedule-manifest", help=MANIFEST_HELP)
def schedule_manifest(
    app_spec: AppOption = None,
    provider: Annotated[
        Provider, typer.Option("--provider", help="Which platform to generate for.")
    ] = Provider.GENERIC,
    base_url: Annotated[
        str | None,
        typer.Option("--base-url", help="The app's URL as the platform reaches it."),
    ] = None,
    out: Annotated[
        Path | None, typer.Option("--out", help="Write files here instead of stdout.")
    ] = None,
    namespace: Annotated[
        str | None, typer.Option("--namespace", help="metadata.namespace of the CronJobs.")
    ] = None,
    secret_name: Annotated[
        str,
        typer.Option("--secret-name", help="Secret holding the trigger token (key 'token')."),
    ] = DEFAULT_SECRET_NAME,
    image: Annotated[
        str, typer.Option("--image", help="Container image with sh and curl.")
    ] = DEFAULT_IMAGE,
    check: Annotated[
        Path | None,
        typer.Option("--check", help="Compare deployed CronJobs at PATH instead of generating."),
    ] = None,
) -> None:
    try:
        if not app_spec:
            raise CliError("--app is required, e.g. --app example_app.main:app")
        scheduling, app_object = find_scheduling(app_spec)
        targets = targets_of(scheduling)
        if check is not None:
            _check(targets, check)
            return
        if not base_url:
            raise CliError(
                "--base-url is required: the app's URL as the platform reaches it, e.g. "
                "http://api.default.svc:8000"
            )
        if not base_url.startswith(("http://", "https://")):
            raise CliError(f"--base-url {base_url!r}: must start with http:// or https://")
        if not targets:
            raise CliError(
                f'--app {app_spec!r} has no trigger="external" schedule — nothing to '
                'generate (set trigger="external" on a schedule, or VOLTRO_TRIGGER=external)'
            )
        options = ManifestOptions(
            base_url=base_url,
            app_name=_app_name(app_spec),
            skew_ms=scheduling.config.external_trigger_skew_ms,
            namespace=namespace,
            secret_name=secret_name,
            image=image,
            prefix=route_prefix(app_object),
        )
        try:
            files = render(provider, targets, options)
        except ManifestError as exc:
            raise CliError(str(exc)) from None
        except ValueError as exc:
            raise CliError(str(exc)) from None
        if out is None:
            typer.echo(stdout_text(files), nl=False)
            return
        for file in files:
            path = out / file.path
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(file.text)
            typer.echo(f"wrote {path}", err=True)
    except CliError as exc:
        typer.echo(f"voltro schedule-manifest: {exc}", err=True)
        raise typer.Exit(code=1) from None


def _check(targets: list[Target], path: Path) -> None:
    try:
        objects = read_manifests(path)
    except (OSError, ValueError) as exc:
        raise CliError(f"--check: {exc}") from None
    drifts = check_cronjobs(targets, objects)
    if not drifts:
        typer.echo(f"in sync: {len(targets)} external schedule(s) match {path}")
        return
    for drift in drifts:
        typer.echo(f"drift: {drift}")
    typer.echo(f"{len(drifts)} difference(s) between the app and {path}", err=True)
    raise typer.Exit(code=1)
