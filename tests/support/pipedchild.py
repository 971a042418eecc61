"""A child interpreter driven by lines: ``Child(code, *args)`` runs ``python -c code args...`` with
``src/`` on its path, pipes on stdin and stdout, and its stderr kept for failure messages.

``line()`` waits for the child's next stdout line, failing the test (the child killed) when none comes
within the deadline or the child exits first; ``send(text)`` writes a line to its stdin; ``result()``
is the JSON of its last line once it exited with 0; ``close()`` ends it and its pipes.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any

import pytest
from helpers import SRC

TIMEOUT = 60.0  # the most any child may take for a line or its exit (they take about a second)


class Child:
    """``python -c code args...`` with pipes; ``line()`` waits for its next stdout line with a deadline."""

    def __init__(self, code: str, *args: Any, env: dict[str, str] | None = None) -> None:
        self._err = tempfile.TemporaryFile()  # noqa: SIM115 (kept for the child's life)
        environment = dict(os.environ if env is None else env)
        environment["PYTHONPATH"] = SRC + os.pathsep + environment.get("PYTHONPATH", "")
        self.proc = subprocess.Popen(
            [sys.executable, "-c", code, *map(str, args)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._err,
            env=environment,
        )
        self._buffer = b""

    def line(self, timeout: float = TIMEOUT) -> str:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                self.kill()
                pytest.fail(f"no line from the child within {timeout} s; its stderr:\n{self.stderr()}")
            if select.select([fd], [], [], left)[0]:
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    self.proc.wait()
                    pytest.fail(f"the child exited ({self.proc.returncode}) before its line; its stderr:\n{self.stderr()}")
                self._buffer += chunk
        text, self._buffer = self._buffer.split(b"\n", 1)
        return text.decode()

    def send(self, text: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(text.encode() + b"\n")
        self.proc.stdin.flush()

    def result(self, timeout: float = TIMEOUT) -> Any:
        """The JSON of the child's last line (its "ready" skipped), once it exited with 0."""
        last = self.line(timeout)
        while last == "ready":
            last = self.line(timeout)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"the child did not exit; its stderr:\n{self.stderr()}")
        assert self.proc.returncode == 0, self.stderr()
        return json.loads(last)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stderr(self) -> str:
        self._err.seek(0)
        return self._err.read().decode(errors="replace")

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()
        self._err.close()
