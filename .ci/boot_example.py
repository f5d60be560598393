"""Boot the example app (the README's first command) and ask its routes: run by
`.ci/lowest-deps` in a venv holding the lowest versions pyproject.toml allows."""

from __future__ import annotations

from fastapi.testclient import TestClient

from example_app.main import app

with TestClient(app) as client:
    health = client.get("/_voltro/health")
    assert health.status_code == 200, (health.status_code, health.text)
    metrics = client.get("/metrics")
    assert metrics.status_code == 200, metrics.status_code
    assert "voltro_schedule_next_fire_timestamp_seconds" in metrics.text
    assert "http_requests_total" in metrics.text  # prometheus-fastapi-instrumentator's
    listing = client.get("/_voltro/inspect/schedules")
    assert listing.status_code in (401, 503), listing.status_code  # no token given: refused
print("example app booted:", health.json())
