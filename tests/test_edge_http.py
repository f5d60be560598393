"""The body cap of ``schedules_router`` (``api/edge.py``) over real HTTP, measured: a uvicorn
server takes six 50 MB chunked bodies at once on the pause route and six on the dashboard's
sign-in route — sent whole, as an attacker would, without a token — and its resident memory
stays flat. Before the cap held on those routes, FastAPI read the pause body whole before the
token was checked and the sign-in route read its form whole: six at once took a server from
~100 MB to 516–628 MB (issue 30)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import chain, repeat
from pathlib import Path

import httpx
import pytest
from support.servers import Server, uvicorn_server
from support.waiting import HANG

pytestmark = pytest.mark.slow

APP = "apps.external_app:app"
TRIGGER_TOKEN = "trigger-edge-http-5b0f7c1e-not-a-real-secret"
INSPECT_TOKEN = "inspect-edge-http-3a9d2e64-not-a-real-secret"
INSPECT = {"Authorization": f"Bearer {INSPECT_TOKEN}"}

MB = 1024 * 1024
BODY_BYTES = 50 * MB
AT_ONCE = 6
CHUNK = 64 * 1024
MAX_GROWTH = 64 * MB
"""Allowed growth of the server's peak resident memory over its idle size: a dozen capped
requests cost a few hundred KiB; a dozen bodies held whole cost more than half a gigabyte."""

PAUSE = "/_voltro/inspect/schedules/hourly/pause"
SIGN_IN = "/_voltro/dashboard/session"
ROUTES = {
    PAUSE: ({"Content-Type": "application/json"}, b'{"reason": "'),
    SIGN_IN: ({"Content-Type": "application/x-www-form-urlencoded"}, b"token="),
}


@dataclass
class Answer:
    route: str
    status: int
    content_type: str
    body: bytes
    sent: int

    def json(self) -> dict[str, object]:
        found: dict[str, object] = json.loads(self.body)
        return found


async def _read_answer(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
    status = int(head[0].split()[1])
    headers = {}
    for line in head[1:]:
        name, sep, value = line.partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    return status, headers, body


async def chunked_post(port: int, route: str, total: int) -> Answer:
    """POST ``total`` bytes to ``route`` as a chunked body (no ``Content-Length``), all of it
    whatever the server answers meanwhile — unless it closes the connection — and read the
    answer concurrently."""
    headers, first = ROUTES[route]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    lines = [f"POST {route} HTTP/1.1", "Host: 127.0.0.1", "Transfer-Encoding: chunked"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    writer.write(("\r\n".join(lines) + "\r\n\r\n").encode())
    answer = asyncio.create_task(_read_answer(reader))
    sent = 0
    try:
        for piece in chain([first], repeat(b"x" * CHUNK)):
            if sent >= total:
                break
            writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            await writer.drain()
            sent += len(piece)
        writer.write(b"0\r\n\r\n")
        await writer.drain()
    except ConnectionError:
        pass  # the server answered and closed: the answer is in the reader
    status, found, body = await asyncio.wait_for(answer, HANG)
    writer.close()
    with contextlib.suppress(ConnectionError):
        await writer.wait_closed()
    return Answer(route, status, found.get("content-type", ""), body, sent)


async def declared_post(port: int, route: str, size: int) -> Answer:
    """Headers declaring a ``size``-byte body, and not one byte of it: the answer must not wait
    for the body."""
    headers, _ = ROUTES[route]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    lines = [f"POST {route} HTTP/1.1", "Host: 127.0.0.1", f"Content-Length: {size}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    writer.write(("\r\n".join(lines) + "\r\n\r\n").encode())
    await writer.drain()
    status, found, body = await asyncio.wait_for(_read_answer(reader), HANG)
    writer.close()
    with contextlib.suppress(ConnectionError):
        await writer.wait_closed()
    return Answer(route, status, found.get("content-type", ""), body, 0)


async def burst(port: int, at_once: int, total: int) -> list[Answer]:
    """``at_once`` bodies of ``total`` bytes to each of the two routes, all at the same time."""
    posts = [chunked_post(port, route, total) for route in ROUTES for _ in range(at_once)]
    return list(await asyncio.gather(*posts))


def status_kib(pid: int, field: str) -> int:
    """A ``/proc/<pid>/status`` memory field (``VmRSS``, ``VmHWM``) in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} in /proc/{pid}/status")


def reset_peak(pid: int) -> bool:
    """Reset the process's ``VmHWM`` to its current RSS (Linux ``clear_refs`` 5)."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    except OSError:
        return False
    return True


@contextlib.contextmanager
def sampled_peak(pid: int) -> Iterator[list[int]]:
    """The highest ``VmRSS`` seen while the block runs, sampled every 2 ms (beside ``VmHWM``,
    which a kernel may not let us reset)."""
    peak = [status_kib(pid, "VmRSS")]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            with contextlib.suppress(OSError, AssertionError):
                peak[0] = max(peak[0], status_kib(pid, "VmRSS"))
            done.wait(0.002)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield peak
    finally:
        done.set()
        thread.join()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    env = {
        "VOLTRO_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'voltro.db'}",
        "VOLTRO_SCHEDULE_TRIGGER_TOKEN": TRIGGER_TOKEN,
        "VOLTRO_INSPECT_TOKEN": INSPECT_TOKEN,
        "VOLTRO_EXTERNAL_MISSED_POLICY": "off",
        "VOLTRO_DEV": "",
    }
    with uvicorn_server(APP, tmp_path, env, name="edge") as running:
        yield running


def test_six_50_mb_chunked_bodies_at_once_leave_the_servers_memory_flat(server: Server) -> None:
    pid = server.process.pid
    # Every code path the burst takes, loaded once before the idle size is read.
    asyncio.run(burst(server.port, 1, 256 * 1024))
    idle = status_kib(pid, "VmRSS")
    reset = reset_peak(pid)
    started = time.monotonic()
    with sampled_peak(pid) as sampled:
        answers = asyncio.run(burst(server.port, AT_ONCE, BODY_BYTES))
    took = time.monotonic() - started
    peak = max(sampled[0], status_kib(pid, "VmHWM") if reset else 0)
    growth = (peak - idle) * 1024
    print(
        f"\n{len(answers)} x {BODY_BYTES // MB} MB chunked bodies in {took:.1f} s: idle RSS "
        f"{idle / 1024:.1f} MiB, peak {peak / 1024:.1f} MiB (+{growth / MB:.1f} MiB; VmHWM "
        f"{'reset' if reset else 'not resettable, sampled'})"
    )
    for answer in answers:
        assert answer.sent >= BODY_BYTES, answer  # sent whole: the server drained, not held it
        assert (answer.status, answer.content_type) == (413, "application/json"), answer
        body = answer.json()
        assert body["code"] == "payload_too_large" and body["limitBytes"] == 16_384, body
        assert isinstance(body["detail"], str)
    assert growth < MAX_GROWTH, f"the server grew by {growth / MB:.0f} MiB"
    # A declared size above the cap is answered without waiting for (or reading) the body.
    for route in ROUTES:
        answer = asyncio.run(declared_post(server.port, route, BODY_BYTES))
        assert answer.status == 413 and answer.json()["code"] == "payload_too_large", answer
    # Nothing was paused, and the server logged no unhandled exception.
    listing = httpx.get(f"{server.url}/_voltro/inspect/schedules", headers=INSPECT, timeout=HANG)
    assert listing.status_code == 200, listing.text
    assert not any(s["paused"] for s in listing.json()["schedules"])
    assert "Exception in ASGI application" not in server.log(), server.log()[-3_000:]
