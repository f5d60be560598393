"""fastapi-voltro-schedules: recurring cron jobs inside a FastAPI app.

One definition runs on a laptop, a fleet of replicas on Postgres, or behind a Kubernetes
CronJob — fired exactly once per slot, with a ledger of what happened to every slot.
"""

from __future__ import annotations

from .api import schedules_router
from .clock import Clock, SystemClock
from .config import SchedulingConfig
from .context import FiringRef, FiringStarter, ScheduleContext, WorkflowStarter
from .cron import CronSpec
from .definition import Schedule, WorkflowTarget, define_schedule
from .discovery import discover_handlers, discover_schedules
from .enums import (
    BackfillPolicy,
    ChangeStrategy,
    Coordination,
    CoordinationOutcome,
    ExternalMissedPolicy,
    OverlapPolicy,
    RecordPolicy,
    Reprocess,
    RunStatus,
    Trigger,
    TriggerMode,
)
from .errors import (
    ConfigurationError,
    DeclaredInCodeError,
    DiscoveryError,
    HandoffError,
    InvalidCronError,
    InvalidScheduleError,
    JobFailedError,
    ScheduleDefinitionError,
    SchemaError,
    StoreUnavailableError,
    VoltroError,
)
from .handlers import NamedHandler, define_handler
from .handoff import Handoff, JobEngine, JobState
from .metrics import SchedulerMetrics
from .models import voltro_metadata
from .monitors import (
    CheckIn,
    CheckInError,
    CheckInStatus,
    HealthchecksMonitor,
    Monitor,
    SentryCronsMonitor,
)
from .outcomes import OutcomeHook, RecordedOutcome
from .retries import RetryPolicy
from .scheduling import Scheduling

__version__ = "0.1.0"

__all__ = [
    "BackfillPolicy",
    "ChangeStrategy",
    "CheckIn",
    "CheckInError",
    "CheckInStatus",
    "Clock",
    "ConfigurationError",
    "Coordination",
    "CoordinationOutcome",
    "CronSpec",
    "DeclaredInCodeError",
    "DiscoveryError",
    "ExternalMissedPolicy",
    "FiringRef",
    "FiringStarter",
    "Handoff",
    "HandoffError",
    "HealthchecksMonitor",
    "InvalidCronError",
    "InvalidScheduleError",
    "JobEngine",
    "JobFailedError",
    "JobState",
    "Monitor",
    "NamedHandler",
    "OutcomeHook",
    "OverlapPolicy",
    "RecordPolicy",
    "RecordedOutcome",
    "Reprocess",
    "RetryPolicy",
    "RunStatus",
    "Schedule",
    "ScheduleContext",
    "ScheduleDefinitionError",
    "SchedulerMetrics",
    "Scheduling",
    "SchedulingConfig",
    "SchemaError",
    "SentryCronsMonitor",
    "StoreUnavailableError",
    "SystemClock",
    "Trigger",
    "TriggerMode",
    "VoltroError",
    "WorkflowStarter",
    "WorkflowTarget",
    "__version__",
    "define_handler",
    "define_schedule",
    "discover_handlers",
    "discover_schedules",
    "schedules_router",
    "voltro_metadata",
]
