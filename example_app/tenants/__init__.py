"""Tenants, each with a report at an hour of its own zone: a run-time schedule per tenant."""
