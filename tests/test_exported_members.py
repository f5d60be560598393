"""The public API lives in one place: the package root, with a sorted __all__."""

from __future__ import annotations

import fastapi_voltro_schedules


def test_all_is_sorted_and_importable() -> None:
    exported = fastapi_voltro_schedules.__all__
    assert exported == sorted(exported)
    for name in exported:
        assert hasattr(fastapi_voltro_schedules, name), name


def test_spec_names_are_public() -> None:
    from fastapi_voltro_schedules import (  # noqa: F401
        Schedule,
        ScheduleContext,
        Scheduling,
        SchedulingConfig,
        WorkflowTarget,
        define_schedule,
        discover_schedules,
        schedules_router,
    )


def test_ships_py_typed() -> None:
    from importlib.resources import files

    assert files("fastapi_voltro_schedules").joinpath("py.typed").is_file()
