"""A peer for the tests: a fresh Python process that opens one lock and runs the commands it
reads from stdin, one a line, answering each with one line on stdout (see conftest.Peer).

    python peer.py KIND PATH LEASE      KIND: Lock, RLock, Read or Write (the sides of an
                                        RWLock), Semaphore:N; LEASE: seconds or "none"

Commands and answers:
    acquire [TIMEOUT]   "acquired TOKEN OWNER_DIED" or "false"
    try                 acquire(blocking=False): as acquire
    release | check     "ok"
    extend SECONDS      "ok"
    locked              "True" or "False"
    count-sigint        installs a SIGINT handler that only counts (it does not raise): "ok"
    sigints             how many SIGINTs that handler saw
    fork                os.fork(); the child checks its inherited hold and exits normally
                        (running its thread-local destructors): "child RELEASE ACQUIRE LOCKED"
    exit                exits (without releasing)
Any exception: "raise NAME MONOTONIC_SECONDS" (KeyboardInterrupt included).
"""

import os
import signal
import sys
import time

import fairlock


SIGINTS: list = []


def main() -> None:
    kind, path, lease = sys.argv[1], sys.argv[2], sys.argv[3]
    lease_s = None if lease == "none" else float(lease)
    if kind.startswith("Semaphore:"):
        lock = fairlock.Semaphore(path, int(kind.split(":")[1]), lease=lease_s)
    elif kind in ("Read", "Write"):
        rw = fairlock.RWLock(path, lease=lease_s)
        lock = rw.read() if kind == "Read" else rw.write()
    else:
        cls = fairlock.RLock if kind == "RLock" else fairlock.Lock
        lock = cls(path, lease=lease_s)
    say(f"ready {os.getpid()}")
    for line in sys.stdin:
        cmd, *args = line.split()
        try:
            say(run(lock, cmd, args))
        except SystemExit:
            raise  # a forked child's normal exit
        except BaseException as e:  # noqa: B902 - KeyboardInterrupt is an answer too
            say(f"raise {type(e).__name__} {time.monotonic():.6f}")
        if cmd == "exit":
            os._exit(0)


def run(lock, cmd: str, args: list) -> str:
    if cmd in ("acquire", "try"):
        if cmd == "try":
            got = lock.acquire(blocking=False)
        elif args:
            got = lock.acquire(timeout=float(args[0]))
        else:
            got = lock.acquire()
        return f"acquired {lock.token} {lock.owner_died}" if got else "false"
    if cmd == "release":
        lock.release()
    elif cmd == "check":
        lock.check()
    elif cmd == "extend":
        lock.extend(float(args[0]))
    elif cmd == "locked":
        return str(lock.locked())
    elif cmd == "count-sigint":
        signal.signal(signal.SIGINT, lambda *_: SIGINTS.append(time.monotonic()))
    elif cmd == "sigints":
        return str(len(SIGINTS))
    elif cmd == "fork":
        return fork_and_check(lock)
    return "ok"


def fork_and_check(lock) -> str:
    """Forks while (presumably) holding; the child tries to release and to take the lock, and
    exits through the normal interpreter exit."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        outcome = []
        for attempt in (lock.release, lambda: lock.acquire(blocking=False), lock.locked):
            try:
                outcome.append(str(attempt()))
            except BaseException as e:  # noqa: B902
                outcome.append(type(e).__name__)
        os.write(w, " ".join(outcome).encode())
        os.close(w)
        sys.exit(0)  # a normal exit: thread-local destructors run, atexit handlers too
    os.close(w)
    with os.fdopen(r) as f:
        result = f.read()
    os.waitpid(pid, 0)
    return f"child {result}"


def say(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
