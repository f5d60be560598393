"""The trigger-and-follow script every generated job runs (POSIX ``sh`` + ``curl``).

It POSTs the trigger route, reads ``runId``, polls ``GET /_voltro/schedules/runs/{runId}``
until ``terminal`` and exits 0 only when the run ``succeeded`` — so the Job's (or the cron
line's) status is the run's status. A retry or a redelivery of the same firing is answered
``duplicate`` with the first run's id and follows that run, so it exits as the first did.

**The stated slot.** The Kubernetes CronJob controller names each Job it creates
``<cronjob>-<minutes since the epoch of the scheduled time>`` (``getJobName`` in the
controller), and the Job controller labels its pods ``batch.kubernetes.io/job-name=<job>``.
The downward API can read a pod *label* (``fieldRef: metadata.labels['…']``) but not the
Job's own annotations (``batch.kubernetes.io/cronjob-scheduled-timestamp`` lives on the Job,
not the pod), so the script takes the Job name from the label, checks it is exactly
``$VOLTRO_CRONJOB-<digits>``, turns the minutes into an ISO-8601 instant (integer arithmetic in
``sh`` — no ``date`` flavour needed) and sends it as ``X-Voltro-Scheduled-At``: the run records
the slot the controller meant, however late the pod started.

**A hand-made Job** (``kubectl create job --from=cronjob/…``, Kubernetes' "run now") has a
name of the operator's choosing, so it states nothing and the arrival time is snapped like any
other arrival: inside the skew budget of an occurrence it *is* that occurrence (a duplicate if
the CronJob already fired it); anywhere else the app answers ``409 off_cadence`` and the script
says to use ``voltro schedule fire NAME`` (the inspect API's Run now), which runs the schedule
off-cadence on purpose and records it ``trigger="manual"``.

Environment: ``VOLTRO_TRIGGER_URL``, ``VOLTRO_RUNS_URL``, ``VOLTRO_SCHEDULE``,
``VOLTRO_SCHEDULE_TRIGGER_TOKEN``; optional ``VOLTRO_CRONJOB`` + ``VOLTRO_JOB_NAME`` (the slot),
``VOLTRO_POLL_SECONDS`` (default 5), ``VOLTRO_RETRIES`` (default 6).

**The app away.** Every request retries a refused connection and a transient answer (``503``
while the app boots, ``502``/``504`` from a proxy) ``VOLTRO_RETRIES`` times with curl's
doubling backoff (1, 2, 4, … s — about a minute in all); a POST retried is a ``duplicate``,
never a second run. While it follows a run, a poll that still fails after those retries costs
one of ``VOLTRO_RETRIES`` lives (as does a ``503`` of an app shutting down or booting), so a
rolling restart of the app mid-run is followed through to
the run's outcome. When it gives up it says why (connection refused, host unknown, no answer)
and exits 1. A run ends ``succeeded`` → exit 0; ``failed``, ``skipped``, ``missed`` → exit 1 —
but a slot ``skipped`` because the schedule excludes its day (``errorTag`` ``excluded``: a
holiday, ``exclude=``) exits 0, like a pause: the day was meant off.

A schedule paused in the app answers ``paused``: the
script exits 0 (the pause is the operator's decision, not a failure to alert on). The script never prints the token. It avoids ``$$`` and
``$(NAME)`` with NAME an environment variable, which Kubernetes would expand in ``args``.
"""

from __future__ import annotations

__all__ = ["TRIGGER_SCRIPT"]

TRIGGER_SCRIPT = r"""auth="Authorization: Bearer $VOLTRO_SCHEDULE_TRIGGER_TOKEN"
retries="${VOLTRO_RETRIES:-6}"
why() {
  case "$1" in
    6) echo "cannot resolve the host of $2" ;;
    7) echo "cannot connect to $2 (connection refused after $retries retries: is the app running and its Service ready?)" ;;
    28) echo "no answer from $2 in time" ;;
    22|56|52) echo "${3:-the app closed the connection} (curl exit $1)" ;;
    *) echo "curl exit $1 on $2${3:+: $3}" ;;
  esac
}
job="${VOLTRO_JOB_NAME:-}"
minutes="${job#"${VOLTRO_CRONJOB:-}"-}"
case "$minutes" in ''|*[!0-9]*) minutes="" ;; esac
[ -n "${VOLTRO_CRONJOB:-}" ] && [ "$job" = "$VOLTRO_CRONJOB-$minutes" ] || minutes=""
if [ -n "$minutes" ]; then
  s=$((minutes * 60)); z=$((s / 86400 + 719468)); era=$((z / 146097)); doe=$((z - era * 146097))
  yoe=$(((doe - doe / 1460 + doe / 36524 - doe / 146096) / 365))
  doy=$((doe - (365 * yoe + yoe / 4 - yoe / 100))); mp=$(((5 * doy + 2) / 153))
  d=$((doy - (153 * mp + 2) / 5 + 1)); m=$((mp < 10 ? mp + 3 : mp - 9)); y=$((yoe + era * 400 + (m <= 2)))
  slot=$(printf '%04d-%02d-%02dT%02d:%02d:00Z' "$y" "$m" "$d" $((s % 86400 / 3600)) $((s % 3600 / 60)))
  echo "voltro: $VOLTRO_SCHEDULE: job $job states its slot $slot"
  answer=$(curl -sS --fail-with-body --retry "$retries" --retry-connrefused -X POST -H "$auth" -H "X-Voltro-Scheduled-At: $slot" "$VOLTRO_TRIGGER_URL")
  rc=$?
else
  echo "voltro: $VOLTRO_SCHEDULE: ${job:-this run} states no slot (not named <cronjob>-<minutes> by the CronJob controller): the arrival time is snapped"
  answer=$(curl -sS --fail-with-body --retry "$retries" --retry-connrefused -X POST -H "$auth" "$VOLTRO_TRIGGER_URL")
  rc=$?
fi
if [ "$rc" -ne 0 ]; then
  echo "voltro: $VOLTRO_SCHEDULE: trigger refused: $(why "$rc" "$VOLTRO_TRIGGER_URL" "$answer")" >&2
  case "$answer" in *off_cadence*)
    [ -z "$minutes" ] && echo "voltro: $VOLTRO_SCHEDULE: a hand-made Job is not an occurrence of the schedule — to run it now, use: voltro schedule fire $VOLTRO_SCHEDULE (Run now, recorded trigger=manual)" >&2 ;;
  esac
  exit 1
fi
echo "voltro: $VOLTRO_SCHEDULE: $answer"
if printf '%s' "$answer" | grep -q '"status": *"paused"'; then
  echo "voltro: $VOLTRO_SCHEDULE: paused in the app, nothing ran"
  exit 0
fi
run_id=$(printf '%s' "$answer" | sed -n 's/.*"runId": *"\([^"]*\)".*/\1/p')
[ -n "$run_id" ] || { echo "voltro: $VOLTRO_SCHEDULE: no run to follow: $answer" >&2; exit 1; }
lost=0
while :; do
  run=$(curl -sS --fail-with-body --retry "$retries" --retry-connrefused -H "$auth" "$VOLTRO_RUNS_URL/$run_id")
  rc=$?
  if [ "$rc" -ne 0 ]; then
    case "$run" in
      *shutting_down*|*scheduler_not_running*|*store_unavailable*) ;;
      *'"code"'*) echo "voltro: $VOLTRO_SCHEDULE: $run" >&2; exit 1 ;;
    esac
    lost=$((lost + 1))
    echo "voltro: $VOLTRO_SCHEDULE: run $run_id: $(why "$rc" "$VOLTRO_RUNS_URL/$run_id" "$run") — still following ($lost/$retries)" >&2
    [ "$lost" -lt "$retries" ] || { echo "voltro: $VOLTRO_SCHEDULE: lost the app while following run $run_id; its outcome is in the ledger" >&2; exit 1; }
    sleep "${VOLTRO_POLL_SECONDS:-5}"
    continue
  fi
  lost=0
  printf '%s' "$run" | grep -q '"terminal": *true' && break
  sleep "${VOLTRO_POLL_SECONDS:-5}"
done
echo "voltro: $VOLTRO_SCHEDULE: $run"
printf '%s' "$run" | grep -q '"status": *"succeeded"' && exit 0
if printf '%s' "$run" | grep -q '"errorTag": *"excluded"'; then
  echo "voltro: $VOLTRO_SCHEDULE: a day the schedule excludes, nothing ran"
  exit 0
fi
exit 1
"""
