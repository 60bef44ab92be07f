"""Targets for multiprocessing children (importable by name, as spawn needs)."""

import time


def count_under_lock(lock, counter_path: str, n: int) -> None:
    """n read-modify-write increments of the number in `counter_path`, each under `lock`
    (with a pause inside, so that a lock that let two in would lose increments)."""
    for _ in range(n):
        with lock:
            with open(counter_path) as f:
                value = int(f.read())
            time.sleep(0.0005)
            with open(counter_path, "w") as f:
                f.write(str(value + 1))


def try_inherited_hold(lock, results) -> None:
    """What a child can do with a lock its parent holds: report each attempt's outcome."""
    out = []
    for attempt in (lock.release, lambda: lock.acquire(timeout=0.2), lock.locked):
        try:
            out.append(repr(attempt()))
        except Exception as e:  # noqa: BLE001 - reported
            out.append(type(e).__name__)
    results.put(out)
