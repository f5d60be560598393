"""Real servers for tests: uvicorn subprocesses on 127.0.0.1, on a free port each."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from support.waiting import HANG

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Server:
    process: subprocess.Popen[str]
    port: int
    log_path: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text()

    def wait_ready(self, name: str, path: str, timeout: float, *, require_ok: bool) -> None:
        """Poll ``path`` until it answers (with a 2xx if ``require_ok``); fail with the log
        when the process exits first or ``timeout`` passes."""
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"{name} exited early:\n{self.log()}")
            try:
                response = httpx.get(self.url + path, timeout=5.0)
                if require_ok:
                    response.raise_for_status()
                return
            except httpx.HTTPError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{name} did not start:\n{self.log()}") from None
                time.sleep(0.1)

    def kill(self, sig: int = signal.SIGKILL, timeout: float = 20.0) -> None:
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()  # never leave a server behind, even a stuck one
                self.process.wait(10)
                raise


@contextmanager
def uvicorn_server(
    app: str,
    tmp_path: Path,
    env: Mapping[str, str] | None = None,
    *,
    name: str = "server",
    ready_path: str = "/openapi.json",
    timeout: float = HANG,
    port: int | None = None,
) -> Iterator[Server]:
    """``python -m uvicorn <app>`` on ``port`` (a free one by default); waits until it answers,
    stops it after."""
    port = free_port() if port is None else port
    log_path = tmp_path / f"{name}.log"
    full_env = {**os.environ, "PYTHONPATH": f"{REPO}:{REPO / 'tests'}", **(env or {})}
    with log_path.open("w") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", app, "--host", "127.0.0.1", "--port", str(port)],
            cwd=tmp_path,
            env=full_env,
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
        )
    server = Server(process, port, log_path)
    try:
        server.wait_ready(name, ready_path, timeout, require_ok=False)
        yield server
    finally:
        server.kill(signal.SIGTERM)
