"""Run ``fedrank serve`` as a real child process on loopback (for the demo, the tests and
the benchmarks): the first start binds port 0 and reads the bound port back (no race with
another process taking a port picked in advance), later starts keep it; wait until the
server answers, stop it gracefully or kill it with SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType

import httpx

from fedrank.errors import FedrankError


class ServerProcess:
    """``fedrank serve`` in a child process.

    Args:
        store: the store directory.
        config: optional ``server.toml``.
        port: the port (default: a free one, bound by the server itself).
        log: file the server's output goes to (default: ``<store>.log`` beside the store).
        **flags: more ``fedrank serve`` flags, e.g. ``workload="foltr-es"``,
            ``iteration_seconds=2``.

    Use as a context manager; :meth:`kill` simulates a crash, :meth:`start` restarts.
    """

    def __init__(
        self,
        store: Path,
        config: Path | None = None,
        port: int | None = None,
        log: Path | None = None,
        **flags: object,
    ) -> None:
        self.store = Path(store)
        self.config = config
        self.port = port  # None: the first start binds port 0 and reads the bound port back
        self.log = log or self.store.with_name(self.store.name + ".log")
        self.port_file = self.store.with_name(self.store.name + ".port")
        self.flags = flags
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        cmd = [sys.executable, "-m", "fedrank.cli", "serve", "--store", str(self.store)]
        cmd += ["--port", str(self.port or 0), "--port-file", str(self.port_file)]
        cmd += ["--host", "127.0.0.1", "--log-level", "warning"]
        if self.config is not None:
            cmd += ["--config", str(self.config)]
        for key, value in self.flags.items():
            flag = f"--{key.replace('_', '-')}"
            if value is True:  # a switch, e.g. new_store=True
                cmd.append(flag)
            elif value is not False:
                cmd += [flag, str(value)]
        return cmd

    def start(self, timeout: float = 30.0) -> ServerProcess:
        """Start the server and wait until ``/v1/status`` answers."""
        self.log.parent.mkdir(parents=True, exist_ok=True)
        self.port_file.unlink(missing_ok=True)
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                self.command(), stdout=out, stderr=subprocess.STDOUT, env={**os.environ}
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise FedrankError(
                    f"the server exited with code {self.process.returncode} during start-up; "
                    f"see {self.log}:\n{self.log.read_text()[-2000:]}"
                )
            if self.port is None and self.port_file.exists():
                self.port = int(self.port_file.read_text())  # later starts keep this port
            try:
                if self.port and httpx.get(self.url + "/v1/status", timeout=1.0).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        self.kill()
        raise FedrankError(f"the server did not answer within {timeout} s; see {self.log}")

    def stop(self, timeout: float = 15.0) -> None:
        """Graceful shutdown (SIGTERM)."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        self.process = None

    def kill(self) -> None:
        """SIGKILL: the process dies at once, as in a crash."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.process = None

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
