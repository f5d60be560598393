"""Fake cron-monitor services over real HTTP: a Healthchecks-style ping endpoint and a Sentry
ingest endpoint, one ``http.server`` on 127.0.0.1 that records every request.

Sentry's SDK posts envelopes to ``/api/<project>/envelope/`` (gzip- or brotli-compressed); the
recorder unpacks them, so a test reads the check-ins as the SDK sent them.
"""

from __future__ import annotations

import gzip
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit


@dataclass(frozen=True)
class Received:
    method: str
    path: str
    query: dict[str, str]
    body: bytes


@dataclass
class FakeMonitorService:
    """What the server received, and what it answers next."""

    port: int = 0
    received: list[Received] = field(default_factory=list)
    answers: list[int] = field(default_factory=list)
    """Status codes for the next requests, first first; then 200."""
    by_path: dict[str, int] = field(default_factory=dict)
    """A fixed status for every request to a path (before :attr:`answers`)."""
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def dsn(self) -> str:
        """A Sentry DSN whose ingest endpoint is this server (project 1)."""
        return f"http://publickey@127.0.0.1:{self.port}/1"

    def pings(self) -> list[Received]:
        with self.lock:
            return [r for r in self.received if r.path.startswith("/ping/")]

    def check_ins(self) -> list[dict[str, Any]]:
        """Every ``check_in`` item of the envelopes received, in arrival order."""
        with self.lock:
            envelopes = [r.body for r in self.received if r.path.endswith("/envelope/")]
        return [
            item
            for envelope in envelopes
            for kind, item in envelope_items(envelope)
            if kind == "check_in"
        ]

    def answer(self, path: str) -> int:
        with self.lock:
            if path in self.by_path:
                return self.by_path[path]
            return self.answers.pop(0) if self.answers else 200


def envelope_items(envelope: bytes) -> Iterator[tuple[str, dict[str, Any]]]:
    """The (type, payload) of each item of a Sentry envelope."""
    rest = envelope.split(b"\n", 1)[1] if b"\n" in envelope else b""
    while rest.strip():
        header_line, rest = rest.split(b"\n", 1)
        header = json.loads(header_line)
        length = header.get("length")
        if length is None:
            payload, _, rest = rest.partition(b"\n")
        else:
            payload, rest = rest[:length], rest[length:].removeprefix(b"\n")
        yield header["type"], json.loads(payload)


def _decoded(body: bytes, encoding: str | None) -> bytes:
    if encoding == "gzip":
        return gzip.decompress(body)
    if encoding == "br":
        import brotli  # type: ignore[import-not-found]  # only when the SDK found it

        return bytes(brotli.decompress(body))
    return body


@contextmanager
def fake_monitor_service() -> Iterator[FakeMonitorService]:
    service = FakeMonitorService()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self._record()

        def do_GET(self) -> None:
            self._record()

        def _record(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = _decoded(self.rfile.read(length), self.headers.get("Content-Encoding"))
            parts = urlsplit(self.path)
            query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
            status = service.answer(parts.path)
            with service.lock:
                service.received.append(Received(self.command, parts.path, query, body))
            payload = b"OK" if status < 400 else b"not OK"
            self.send_response(status)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    service.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, name="fake-monitors", daemon=True)
    thread.start()
    try:
        yield service
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
