"""AWS: a CloudFormation template — EventBridge Scheduler schedules (cron in AWS's dialect,
``ScheduleExpressionTimezone``) that put an event on a dedicated bus, and one rule per schedule
that sends it to an API destination whose connection holds the token.

Why this chain: EventBridge Scheduler evaluates cron in a time zone but has no HTTP target of
its own; an API destination (the HTTP target) is reachable only from a rule. The token lives in
the connection (``API_KEY`` auth, header ``Authorization: Bearer …``, stored by EventBridge in
Secrets Manager) and comes in as a ``NoEcho`` parameter — never in the template. An API
destination cannot poll the run, so the Scheduler's status is the *trigger's* answer; the run's
outcome is in the ledger and ``voltro_schedule_runs_total``. No slot is stated: the arrival
time is snapped, and both retry policies stop at the app's skew budget so a retry never
arrives after its occurrence closed. DST (AWS's published rule): a time in the spring-forward
gap is skipped (recorded ``missed``), a repeated time runs once.
"""

from __future__ import annotations

import json
import re
from typing import Any

from .dialects import aws_cron
from .names import dns_name
from .targets import ManifestOptions, Target

__all__ = ["SOURCE", "template"]

SOURCE = "voltro.schedules"


def _logical(name: str) -> str:
    return "".join(p.capitalize() for p in re.split(r"[^A-Za-z0-9]+", dns_name(name)) if p)


def template(targets: list[Target], options: ManifestOptions) -> dict[str, Any]:
    skew_s = max(60, options.skew_ms // 1000)
    resources: dict[str, Any] = {
        "VoltroScheduleBus": {
            "Type": "AWS::Events::EventBus",
            "Properties": {"Name": f"{options.app_name}-voltro-schedules"},
        },
        "VoltroTriggerConnection": {
            "Type": "AWS::Events::Connection",
            "Properties": {
                "AuthorizationType": "API_KEY",
                "AuthParameters": {
                    "ApiKeyAuthParameters": {
                        "ApiKeyName": "Authorization",
                        "ApiKeyValue": {"Fn::Sub": "Bearer ${TriggerToken}"},
                    }
                },
            },
        },
        "VoltroTriggerDestination": {
            "Type": "AWS::Events::ApiDestination",
            "Properties": {
                "ConnectionArn": {"Fn::GetAtt": ["VoltroTriggerConnection", "Arn"]},
                "HttpMethod": "POST",
                "InvocationEndpoint": options.trigger_url("*").replace("%2A", "*"),
                "InvocationRateLimitPerSecond": 10,
            },
        },
    }
    for target in targets:
        logical = _logical(target.name)
        resources[f"{logical}Schedule"] = {
            "Type": "AWS::Scheduler::Schedule",
            "Properties": {
                "Name": dns_name(target.name, prefix=f"{options.app_name}-", limit=64),
                "Description": target.description or f"voltro schedule {target.name}",
                "ScheduleExpression": aws_cron(target.spec),
                "ScheduleExpressionTimezone": target.timezone,
                "FlexibleTimeWindow": {"Mode": "OFF"},
                "State": "ENABLED",
                "Target": {
                    "Arn": {"Fn::GetAtt": ["VoltroScheduleBus", "Arn"]},
                    "RoleArn": {"Ref": "SchedulerRoleArn"},
                    "EventBridgeParameters": {"Source": SOURCE, "DetailType": target.name},
                    "Input": json.dumps({"schedule": target.name}),
                    "RetryPolicy": {
                        "MaximumRetryAttempts": 3,
                        "MaximumEventAgeInSeconds": skew_s,
                    },
                },
            },
        }
        resources[f"{logical}Rule"] = {
            "Type": "AWS::Events::Rule",
            "Properties": {
                "EventBusName": {"Ref": "VoltroScheduleBus"},
                "EventPattern": {"source": [SOURCE], "detail-type": [target.name]},
                "Targets": [
                    {
                        "Id": "trigger",
                        "Arn": {"Fn::GetAtt": ["VoltroTriggerDestination", "Arn"]},
                        "RoleArn": {"Ref": "RuleRoleArn"},
                        "HttpParameters": {"PathParameterValues": [target.name]},
                        "RetryPolicy": {
                            "MaximumRetryAttempts": 3,
                            "MaximumEventAgeInSeconds": skew_s,
                        },
                    }
                ],
            },
        }
    return {
        "AWSTemplateFormatVersion": "2010-09-09",
        "Description": f"voltro schedules of {options.app_name}: EventBridge Scheduler → "
        "rule → API destination (POST /_voltro/schedules/{name}/trigger)",
        "Parameters": {
            "TriggerToken": {
                "Type": "String",
                "NoEcho": True,
                "Description": "The app's VOLTRO_SCHEDULE_TRIGGER_TOKEN",
            },
            "SchedulerRoleArn": {
                "Type": "String",
                "Description": "Role EventBridge Scheduler assumes (events:PutEvents on the bus)",
            },
            "RuleRoleArn": {
                "Type": "String",
                "Description": "Role the rules assume (events:InvokeApiDestination)",
            },
        },
        "Resources": resources,
    }
