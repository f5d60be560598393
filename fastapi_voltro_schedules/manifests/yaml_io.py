"""YAML in and out: deterministic documents (key order as built, block style, scripts as
literal blocks) and a reader for what ``kubectl`` hands back (multi-document files and
``kind: List``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import yaml

__all__ = ["dump_documents", "load_objects"]


class _Dumper(yaml.SafeDumper):
    """SafeDumper that writes multi-line strings as ``|`` blocks, so a script stays readable
    (and diffable) in the manifest, and never writes anchors (a shared dict is written out
    each time: kubectl users read these files)."""

    def ignore_aliases(self, data: object) -> bool:
        return True


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    if "\n" in value:
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|")
    return dumper.represent_scalar("tag:yaml.org,2002:str", value)


_Dumper.add_representer(str, _str)


def dump_documents(documents: Iterable[dict[str, Any]], header: str = "") -> str:
    """``---``-separated YAML documents, keys in insertion order; ``header`` (comment lines)
    first."""
    body = yaml.dump_all(
        list(documents),
        Dumper=_Dumper,
        sort_keys=False,
        default_flow_style=False,
        explicit_start=True,
        width=10_000,
        allow_unicode=True,
    )
    return header + body


def load_objects(text: str, source: str) -> list[dict[str, Any]]:
    """Every object of a YAML stream; a ``kind: List`` (``kubectl get … -o yaml``) is opened
    into its items. Raises ``ValueError`` naming ``source`` on YAML that does not parse."""
    try:
        documents = list(yaml.safe_load_all(text))
    except yaml.YAMLError as exc:
        raise ValueError(f"{source}: not YAML: {exc}") from None
    objects: list[dict[str, Any]] = []
    for doc in documents:
        if doc is None:
            continue
        if not isinstance(doc, dict):
            raise ValueError(f"{source}: a document is not a mapping (got {type(doc).__name__})")
        if doc.get("kind") == "List" or str(doc.get("kind", "")).endswith("List"):
            for item in doc.get("items") or []:
                if isinstance(item, dict):
                    objects.append(item)
            continue
        objects.append(doc)
    return objects
