"""Shared fixtures: a lock path in a fresh directory, and Peer, a lock in another process."""

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import List, Optional

import pytest

import fairlock

PEER = str(Path(__file__).with_name("peer.py"))


@pytest.fixture
def lock_path(tmp_path: Path) -> str:
    return str(tmp_path / "test.lock")


def wait_until(what, timeout: float = 10.0, every: float = 0.002):
    """Polls `what()` until it is truthy (returned) or `timeout` runs out (AssertionError)."""
    deadline = time.monotonic() + timeout
    while True:
        value = what()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(every)


def waiters(path: str) -> int:
    return fairlock.status(path)["waiters"]


class Peer:
    """A fresh Python process holding one lock object on `path` (tests/peer.py), driven by
    one-line commands: `peer.call("acquire")` -> "acquired 3 False"."""

    def __init__(self, path: str, lease: Optional[float] = None, kind: str = "Lock"):
        self.proc = subprocess.Popen(
            [sys.executable, PEER, kind, path, "none" if lease is None else str(lease)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        self._buffer = b""
        ready = self.reply(timeout=30)
        assert ready.startswith("ready "), ready
        self.pid = int(ready.split()[1])

    def send(self, command: str) -> None:
        self.proc.stdin.write(command.encode() + b"\n")
        self.proc.stdin.flush()

    def has_reply(self) -> bool:
        if b"\n" in self._buffer:
            return True
        readable, _, _ = select.select([self.proc.stdout], [], [], 0)
        if readable:
            self._fill()
        return b"\n" in self._buffer

    def reply(self, timeout: float = 10.0) -> str:
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            readable, _, _ = select.select([self.proc.stdout], [], [], max(left, 0))
            if not readable:
                raise AssertionError(f"peer {self.pid}: no reply within {timeout} s")
            if not self._fill():
                raise AssertionError(f"peer {self.pid} exited ({self.proc.wait()})")
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line.decode()

    def _fill(self) -> bool:
        chunk = os.read(self.proc.stdout.fileno(), 4096)
        self._buffer += chunk
        return bool(chunk)

    def call(self, command: str, timeout: float = 10.0) -> str:
        self.send(command)
        return self.reply(timeout)

    def signal(self, sig: int) -> None:
        os.kill(self.proc.pid, sig)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()

    def close(self) -> None:
        self.kill()
        self.proc.stdin.close()
        self.proc.stdout.close()


@pytest.fixture
def peers():
    """Makes Peers and kills whatever is left of them at the end of the test."""
    made: List[Peer] = []

    def make(path: str, lease: Optional[float] = None, kind: str = "Lock") -> Peer:
        p = Peer(path, lease, kind)
        made.append(p)
        return p

    yield make
    for p in made:
        p.close()


# A test that leaves SIGINT ignored or replaced would break the next; restore it.
@pytest.fixture(autouse=True)
def _default_sigint():
    before = signal.getsignal(signal.SIGINT)
    yield
    signal.signal(signal.SIGINT, before)
