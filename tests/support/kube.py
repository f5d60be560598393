"""What Kubernetes does to a container before it runs, for running a generated CronJob's
command on this machine: the environment built from ``env`` (values, Secret keys, downward-API
fields) and ``$(VAR)`` expanded in ``command``/``args`` — a port of Kubernetes'
``third_party/forked/golang/expansion`` (``$$`` → ``$``; ``$(NAME)`` → the variable's value
when defined, left as written when not; anything else kept)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def expand(text: str, env: Mapping[str, str]) -> str:
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch != "$" or i + 1 >= len(text):
            out.append(ch)
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "$":  # escaped operator
            out.append("$")
            i += 2
        elif nxt == "(":
            close = text.find(")", i + 2)
            if close == -1:  # incomplete reference: kept
                out.append("$(")
                i += 2
                continue
            name = text[i + 2 : close]
            out.append(env[name] if name in env else f"$({name})")
            i = close + 1
        else:
            out.append("$" + nxt)
            i += 2
    return "".join(out)


def container_env(
    container: Mapping[str, Any],
    secrets: Mapping[tuple[str, str], str],
    fields: Mapping[str, str],
) -> dict[str, str]:
    """The container's environment as the kubelet builds it (in order, so a later value may
    reference an earlier one with ``$(NAME)``). A Secret key or a field the test does not
    provide raises ``KeyError``: the pod would not start either."""
    env: dict[str, str] = {}
    for var in container.get("env", []):
        if "value" in var:
            env[var["name"]] = expand(str(var["value"]), env)
        elif "secretKeyRef" in var.get("valueFrom", {}):
            ref = var["valueFrom"]["secretKeyRef"]
            env[var["name"]] = secrets[(ref["name"], ref["key"])]
        elif "fieldRef" in var.get("valueFrom", {}):
            env[var["name"]] = fields[var["valueFrom"]["fieldRef"]["fieldPath"]]
        else:
            raise KeyError(f"unsupported env source: {var}")
    return env


def container_argv(container: Mapping[str, Any], env: Mapping[str, str]) -> list[str]:
    return [expand(part, env) for part in [*container["command"], *container.get("args", [])]]
