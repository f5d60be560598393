"""The edge of ``schedules_router``: what a request may carry, refused before anything holds it
whole or hands it to a store.

Every route of the router is a :class:`.errors.VoltroRoute`, which passes each request through
here before its dependencies (the token check among them) and its body parsing run:

* **A body is at most** :data:`MAX_BODY_BYTES`. A declared ``Content-Length`` above it is
  refused without reading a byte (:func:`check_declared_length`); a body without one (chunked)
  is cut as soon as it passes the cap, whoever reads it — FastAPI parsing a declared body
  parameter before the token is checked, a route reading ``request.body()``, or
  :func:`read_body` — because the request a route sees counts the bytes it receives
  (:func:`bounded`). Six 50 MB chunked posts at once took a server to 600 MB; now each costs
  at most the cap. The answer is ``413 payload_too_large``, the same on every route.
* **Text a store cannot hold never reaches one** (:func:`unstorable`, :data:`StorableText`):
  a NUL byte (Postgres' text columns refuse it) or a lone surrogate (``"\\ud800"`` in JSON:
  not a character, so no UTF-8 to write). The store then failed, the route answered
  ``503 store unavailable`` with the driver's text, and the store-error alert fired for a
  typo. Refused here as ``422`` naming the field, nothing is written or counted.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Request
from pydantic import AfterValidator
from starlette.types import Message

from ..errors import PayloadTooLargeError

__all__ = [
    "MAX_BODY_BYTES",
    "MAX_SCHEDULE_BODY_BYTES",
    "StorableText",
    "bounded",
    "check_declared_length",
    "read_body",
    "too_large",
    "unstorable",
]

MAX_BODY_BYTES = 16 * 1024
"""The largest request body any route of ``schedules_router`` reads. The largest body a route
takes is a range backfill's ``{"from", "to", "confirm", "limit"}`` (under 200 bytes), then a
pause's ``{"reason"}`` (at most 500 characters) and a sign-in form (one token); anything bigger
is refused with 413 before it is held in memory — a declared ``Content-Length`` before anything
else, a chunked body as soon as it passes the cap."""


MAX_SCHEDULE_BODY_BYTES = 64 * 1024
"""The largest body of ``PUT /_voltro/inspect/schedules/{name}`` (a run-time schedule): its
``args`` may hold up to 16 KiB of JSON (``runtime_schedules.MAX_ARGS_BYTES``), which a client
may send with every character escaped; the args' own limit is checked on the parsed value."""


def too_large(size: int | None = None, limit: int = MAX_BODY_BYTES) -> PayloadTooLargeError:
    said = f" ({size:,} bytes)" if size is not None else ""
    what = (
        "a run-time schedule's body is its definition, with args of at most 16 KiB"
        if limit == MAX_SCHEDULE_BODY_BYTES
        else 'a range backfill body is {"from", "to", "confirm", "limit"}, a pause body '
        '{"reason"}, nothing more'
    )
    return PayloadTooLargeError(
        f"the request body{said} is larger than the {limit:,} bytes this route takes — {what}",
        limit=limit,
    )


def check_declared_length(request: Request, limit: int = MAX_BODY_BYTES) -> None:
    """413 for a declared ``Content-Length`` above :data:`MAX_BODY_BYTES`, before anything is
    read (and before the token is checked: refusing a size reveals nothing)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.strip().isdigit() and int(declared) > limit:
        raise too_large(int(declared), limit)


def bounded(request: Request, limit: int = MAX_BODY_BYTES) -> Request:
    """``request`` with its body capped at :data:`MAX_BODY_BYTES`: its receive raises
    :func:`too_large` on the message that passes the cap, so whatever reads the body stops
    there (the server reads the rest off the socket and drops it, never holding it)."""
    receive = request.receive
    received = 0

    async def limited_receive() -> Message:
        nonlocal received
        message = await receive()
        if message["type"] == "http.request":
            received += len(message.get("body", b""))
            if received > limit:
                raise too_large(limit=limit)
        return message

    return Request(request.scope, limited_receive)


async def read_body(request: Request, limit: int = MAX_BODY_BYTES) -> bytes:
    """The request body, read chunk by chunk and refused (413) as soon as it passes
    :data:`MAX_BODY_BYTES` (also for a request that did not come through :func:`bounded`)."""
    check_declared_length(request, limit)
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise too_large(limit=limit)
    return bytes(body)


def unstorable(text: str) -> str | None:
    """Why ``text`` cannot be written to (or looked up in) every store, or ``None``: the stores
    hold any Unicode text but these two."""
    if "\x00" in text:
        return "holds a NUL byte (U+0000), which the database cannot store — remove it"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        return (
            f"holds a lone surrogate (U+{ord(text[error.start]):04X}), which is not a "
            "character and cannot be stored — send the text as valid UTF-8 (a JSON \\uD83D "
            "escape must be followed by its low half, \\uDE00)"
        )
    return None


def _storable(text: str) -> str:
    problem = unstorable(text)
    if problem is not None:
        raise ValueError(problem)
    return text


StorableText = Annotated[str, AfterValidator(_storable)]
"""A request field of text that a store will hold: a model field of this type is a
``422 invalid_request`` naming the field when :func:`unstorable` refuses it."""
