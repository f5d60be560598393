"""``RunSeries``: the per-schedule run series, exposed exactly as prometheus_client's own
labelled collectors would expose them, at a few tracked objects per schedule instead of ~80."""

from __future__ import annotations

import gc

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from fastapi_voltro_schedules.metrics import (
    DURATION_BUCKETS,
    LAG_BUCKETS,
    SchedulerMetrics,
)

# Values on and around the bucket bounds (le: a value equal to a bound counts in it), a value
# past the last finite bound, and zero.
VALUES = [0.0, 0.004, 0.005, 0.0051, 0.3, 1.0, 59.9, 60.0, 7000.0]


def _samples(registry: CollectorRegistry) -> list[tuple[str, tuple[tuple[str, str], ...], float]]:
    """Every sample of the five run families but the ``_created`` stamps (times of creation)."""
    families = (
        "voltro_schedule_runs",
        "voltro_schedule_run_duration_seconds",
        "voltro_schedule_lag_seconds",
        "voltro_schedule_last_success_timestamp_seconds",
        "voltro_schedule_running",
    )
    out = []
    for metric in registry.collect():
        if metric.name not in families:
            continue
        for s in metric.samples:
            if not s.name.endswith("_created"):
                out.append((s.name, tuple(sorted(s.labels.items())), s.value))
    return sorted(out)


def _oracle(registry: CollectorRegistry) -> tuple[Counter, Histogram, Histogram, Gauge, Gauge]:
    runs = Counter("voltro_schedule_runs", "-", ["name", "status", "trigger"], registry=registry)
    duration = Histogram(
        "voltro_schedule_run_duration_seconds",
        "-",
        ["name"],
        buckets=DURATION_BUCKETS,
        registry=registry,
    )
    lag = Histogram(
        "voltro_schedule_lag_seconds", "-", ["name"], buckets=LAG_BUCKETS, registry=registry
    )
    last = Gauge("voltro_schedule_last_success_timestamp_seconds", "-", ["name"], registry=registry)
    running = Gauge("voltro_schedule_running", "-", ["name"], registry=registry)
    return runs, duration, lag, last, running


def test_the_exposition_is_prometheus_clients_own() -> None:
    oracle, ours = CollectorRegistry(), CollectorRegistry()
    series = SchedulerMetrics(ours).series
    runs, duration, lag, last, running = _oracle(oracle)
    for i, value in enumerate(VALUES):
        name = "ab"[i % 2]
        status = ("succeeded", "failed")[i % 3 == 0]
        lag.labels(name=name).observe(value)
        series.started((), [(name, value)])
        duration.labels(name=name).observe(value)
        runs.labels(name=name, status=status, trigger="self").inc()
        last.labels(name=name).set(1000.0 + i)
        series.recorded([(name, status, "self", value, 1000.0 + i)])
    running.labels(name="a").inc()
    running.labels(name="a").inc()
    running.labels(name="a").dec()
    running.labels(name="b").inc()
    running.labels(name="b").dec()
    for name, up in (("a", True), ("a", True), ("a", False), ("b", True), ("b", False)):
        if up:
            series.started([name], ())
        else:
            series.ended([name])

    assert _samples(ours) == _samples(oracle)
    text = generate_latest(ours).decode()
    assert "# TYPE voltro_schedule_runs_total counter" in text
    assert "# TYPE voltro_schedule_lag_seconds histogram" in text
    assert 'voltro_schedule_lag_seconds_bucket{le="+Inf",name="a"} 5.0' in text
    assert 'voltro_schedule_lag_seconds_created{name="a"}' in text
    assert 'voltro_schedule_runs_created{name="a",status="failed",trigger="self"}' in text


def test_the_batches_expose_what_one_update_at_a_time_does() -> None:
    """The store seam's batches (a herd's rows at once): the same exposition as the oracle fed
    one observation at a time — a duration only where one is given, a success stamp only for
    a success, the gauge up and down by name."""
    oracle, ours = CollectorRegistry(), CollectorRegistry()
    series = SchedulerMetrics(ours).series
    runs, duration, lag, last, running = _oracle(oracle)
    names = ["ab"[i % 2] for i in range(len(VALUES))]
    lags = [(name, value) for name, value in zip(names, VALUES, strict=True)]
    for name, value in lags:
        running.labels(name=name).inc()
        lag.labels(name=name).observe(value)
    series.started(names, lags)
    rows = []
    for i, (name, value) in enumerate(lags):
        status = ("succeeded", "failed", "skipped")[i % 3]
        timed = status != "skipped"  # a skipped row ran nothing: no duration
        stamp = 1000.0 + i if status == "succeeded" else None
        rows.append((name, status, "self", value if timed else None, stamp))
        runs.labels(name=name, status=status, trigger="self").inc()
        if timed:
            duration.labels(name=name).observe(value)
        if stamp is not None:
            last.labels(name=name).set(stamp)
    series.recorded(rows)
    series.ended(names[:-1])
    for name in names[:-1]:
        running.labels(name=name).dec()

    assert _samples(ours) == _samples(oracle)
    assert ("voltro_schedule_running", (("name", "a"),), 1.0) in _samples(ours)


def test_the_names_are_taken_on_the_registry() -> None:
    """Registering the families twice on one registry is refused, as for any collector."""
    registry = CollectorRegistry()
    SchedulerMetrics(registry)
    try:
        SchedulerMetrics(registry)
    except ValueError as exc:
        assert "Duplicated timeseries" in str(exc)
    else:
        raise AssertionError("a second SchedulerMetrics on one registry was accepted")


def _tracked_per_schedule(observe_all: object, n: int = 2000) -> float:
    gc.collect()
    before = len(gc.get_objects())
    kept = observe_all(n)  # type: ignore[operator]
    gc.collect()
    after = len(gc.get_objects())
    assert kept is not None
    return (after - before) / n


def test_a_schedule_costs_a_few_tracked_objects() -> None:
    """What every schedule's first firing leaves on the heap for every later full collection
    to walk: the five series here, against prometheus_client's labelled children."""

    def ours(n: int) -> object:
        series = SchedulerMetrics(CollectorRegistry()).series
        for i in range(n):
            name = f"s{i}"
            series.started([name], [(name, 0.01)])
            series.recorded([(name, "succeeded", "self", 0.02, 1.0)])
            series.ended([name])
        return series

    def theirs(n: int) -> object:
        registry = CollectorRegistry()
        runs = Counter("r", "-", ["name", "status", "trigger"], registry=registry)
        duration = Histogram("d", "-", ["name"], buckets=DURATION_BUCKETS, registry=registry)
        lag = Histogram("l", "-", ["name"], buckets=LAG_BUCKETS, registry=registry)
        last = Gauge("s", "-", ["name"], registry=registry)
        running = Gauge("g", "-", ["name"], registry=registry)
        for i in range(n):
            name = f"s{i}"
            running.labels(name=name).inc()
            lag.labels(name=name).observe(0.01)
            runs.labels(name=name, status="succeeded", trigger="self").inc()
            duration.labels(name=name).observe(0.02)
            last.labels(name=name).set(1.0)
            running.labels(name=name).dec()
        return registry

    mine, oracle = _tracked_per_schedule(ours), _tracked_per_schedule(theirs)
    assert mine <= 6, mine
    assert oracle >= 10 * mine, (mine, oracle)
