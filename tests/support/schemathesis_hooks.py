"""Schemathesis hooks for tests/test_openapi_contract.py (loaded with
``SCHEMATHESIS_HOOKS=support.schemathesis_hooks``).

The PUT body's ``cron`` is published as ``format: cron`` — a custom format, because no JSON
Schema spells which five-field texts are cron expressions (ranges that do not run backwards,
days that occur in their months). A format's values are the tester's to supply: these are
expressions the route takes, so the positive cases exercise the route rather than its refusal
(the negative ones still send every non-string)."""

from __future__ import annotations

import schemathesis
from hypothesis import strategies as st

CRON_EXAMPLES = [
    "0 9 * * *",
    "*/15 * * * *",
    "30 2 * * MON-FRI",
    "0 0 1 * *",
    "@hourly",
    "15 */2 * * * *",
    "0 8-18/2 * JAN,JUL 1-5",
]

schemathesis.openapi.format("cron", st.sampled_from(CRON_EXAMPLES))

# The PUT body's exclude items name holidays calendars by codes only the holidays package knows
# (a subdivision is its country's): valid ones, coupled by sampling one country.
schemathesis.openapi.format("holidays-country", st.just("DE"))
schemathesis.openapi.format("holidays-subdiv", st.sampled_from(["BY", "BE", "HH", "NW"]))
schemathesis.openapi.format("holidays-language", st.sampled_from(["de", "en_US"]))
