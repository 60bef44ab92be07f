"""fairlock against threading.Lock, filelock, portalocker, fasteners and diskcache.Lock, from
Python, in one run: uncontended acquire + release, and 4 workers contending.

    python python/bench/run.py [--quick] [--only NAME ...]

Prints markdown: the load, the tables, and the ratios the targets are stated in (issue 16).
Every figure comes from this run; the competitors are measured in interleaved rounds
(A B C ... then ... C B A) so that a change in the machine's load touches all of them.

* Uncontended: one thread, `acquire(); release()` in a loop for a fixed time per round; ns per
  pair, the median of the rounds (and their range).
* Contended: 4 workers (processes that each open the lock; threads of one process for
  threading.Lock) start together and each loop: stamp `arrive` (CLOCK_MONOTONIC, shared by
  all processes), acquire, stamp `acquire`, busy-spin the critical section, release; no work
  outside the lock. Per acquisition, wait = acquire - arrive. "Out of arrival order": granted
  while a worker that had arrived earlier was still waiting (sorted by `acquire`, an
  acquisition with any later one of smaller `arrive`). "Out of token order" (fairlock): grants
  whose fencing token is not larger than the previous grant's; must be 0.
* The machine's own stalls, the control for those waits, in rounds interleaved with the
  contended ones: one process per CPU that never sleeps and takes no lock; the longest time one
  of them was kept off its CPU, and how often for over 1 ms.
"""

import argparse
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from array import array
from typing import Dict, List, Optional

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from competitors import COMPETITORS, Competitor, by_name  # noqa: E402

WORKERS = 4


def interleaved(items: list, rounds: int) -> list:
    """A B C, C B A, A B C, ...: `rounds` passes over `items`, every other one reversed."""
    order = []
    for r in range(rounds):
        order += items if r % 2 == 0 else items[::-1]
    return order


# -- uncontended ---------------------------------------------------------------------------


def uncontended_round(lock, seconds: float) -> float:
    """ns per acquire + release, looping for about `seconds`."""
    acquire, release = lock.acquire, lock.release
    n, batch = 0, 16
    start = time.perf_counter_ns()
    deadline = start + int(seconds * 1e9)
    while True:
        for _ in range(batch):
            acquire()
            release()
        n += batch
        now = time.perf_counter_ns()
        if now >= deadline:
            return (now - start) / n
        batch = min(batch * 2, 65536)


def uncontended(competitors: List[Competitor], d: str, rounds: int, seconds: float) -> Dict[str, List[float]]:
    locks = {c.name: c.make(d) for c in competitors}
    for lock in locks.values():  # warm up: files created, code paths taken
        uncontended_round(lock, seconds / 10)
    results: Dict[str, List[float]] = {c.name: [] for c in competitors}
    for c in interleaved(competitors, rounds):
        results[c.name].append(uncontended_round(locks[c.name], seconds))
    return results


# -- contended -----------------------------------------------------------------------------


def contend(c: Competitor, d: str, start_ns: int, stop_ns: int, cs_ns: int, lock=None) -> bytes:
    """One worker's loop (see the module doc); returns its log: arrive, acquire, token per
    acquisition (token 0 for a lock without one)."""
    if lock is None:
        lock = c.make(d)
    token = (lambda: lock.token) if c.name == "fairlock" else (lambda: 0)
    log = array("q")
    clock = time.monotonic_ns
    while clock() < start_ns:
        time.sleep(0.0005)
    while True:
        arrive = clock()
        if arrive >= stop_ns:
            break
        lock.acquire()
        got = clock()
        t = token()
        end = got + cs_ns
        while clock() < end:
            pass
        lock.release()
        log.extend((arrive, got, t))
    return log.tobytes()


def _process_worker(name: str, d: str, start_ns: int, stop_ns: int, cs_ns: int, conn) -> None:
    [c] = by_name([name])
    conn.send_bytes(contend(c, d, start_ns, stop_ns, cs_ns))
    conn.close()


def fork_children(n: int, target, args: tuple) -> tuple:
    """Starts `n` forked processes running `target(*args, conn)`; returns the parent's ends of
    their pipes and the processes."""
    ctx = multiprocessing.get_context("fork")
    pipes, procs = [], []
    for _ in range(n):
        parent, child = ctx.Pipe(duplex=False)
        p = ctx.Process(target=target, args=(*args, child))
        p.start()
        child.close()
        pipes.append(parent)
        procs.append(p)
    return pipes, procs


def contended_round(c: Competitor, d: str, seconds: float, cs_ns: int) -> List[array]:
    """One round: WORKERS workers for `seconds`; each worker's log."""
    lead = 0.5 if c.workers == "processes" else 0.05  # time for the workers to start
    start_ns = time.monotonic_ns() + int(lead * 1e9)
    stop_ns = start_ns + int(seconds * 1e9)
    logs: List[bytes] = []
    if c.workers == "threads":
        lock = c.make(d)
        out: List[Optional[bytes]] = [None] * WORKERS

        def run(i: int) -> None:
            out[i] = contend(c, d, start_ns, stop_ns, cs_ns, lock)

        threads = [threading.Thread(target=run, args=(i,)) for i in range(WORKERS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        logs = [b for b in out if b is not None]
    else:
        pipes, procs = fork_children(WORKERS, _process_worker, (c.name, d, start_ns, stop_ns, cs_ns))
        logs = [p.recv_bytes() for p in pipes]
        for p in procs:
            p.join()
            if p.exitcode != 0:
                raise SystemExit(f"{c.name}: a worker failed ({p.exitcode})")
    result = []
    for b in logs:
        a = array("q")
        a.frombytes(b)
        result.append(a)
    return result


def percentile(sorted_values: List[int], q: float) -> int:
    if not sorted_values:
        return 0
    i = min(len(sorted_values) - 1, max(0, int(round(q * (len(sorted_values) - 1)))))
    return sorted_values[i]


def analyse(logs: List[array], seconds: float) -> dict:
    """The figures of one round (see the module doc)."""
    rows = []  # (acquire, arrive, token, worker)
    counts = []
    for w, log in enumerate(logs):
        counts.append(len(log) // 3)
        for i in range(0, len(log), 3):
            rows.append((log[i + 1], log[i], log[i + 2], w))
    rows.sort()
    waits = sorted(acq - arr for acq, arr, _, _ in rows)
    out_of_order = 0
    smallest_later = None
    for acq, arr, _, _ in reversed(rows):
        if smallest_later is not None and smallest_later < arr:
            out_of_order += 1
        smallest_later = arr if smallest_later is None else min(smallest_later, arr)
    tokens = [t for _, _, t, _ in rows]
    token_disorder = sum(1 for a, b in zip(tokens, tokens[1:]) if b <= a) if any(tokens) else None
    total = len(rows)
    return {
        "n": total,
        "ops": total / seconds,
        "min_share": min(counts) / total if total else 0.0,
        "max_share": max(counts) / total if total else 0.0,
        "p50": percentile(waits, 0.50),
        "p99": percentile(waits, 0.99),
        "max": waits[-1] if waits else 0,
        "out_of_order": out_of_order / total if total else 0.0,
        "token_disorder": token_disorder,
    }


NOISE = "(no lock: the control)"


def contended(competitors: List[Competitor], d: str, rounds: int, seconds: float, cs_ns: int) -> Dict[str, List[dict]]:
    """Every competitor's rounds and, interleaved with them as one more entry, the rounds of
    the control (`noise_round`), under the key `NOISE`."""
    results: Dict[str, List[dict]] = {c.name: [] for c in competitors}
    results[NOISE] = []
    # The control in the middle of the order, so that the reversed passes do not put two of
    # its rounds back to back.
    half = len(competitors) // 2
    for c in interleaved(list(competitors[:half]) + [None] + list(competitors[half:]), rounds):
        if c is None:
            results[NOISE].append(noise_round(seconds))
        else:
            results[c.name].append(analyse(contended_round(c, d, seconds, cs_ns), seconds))
    return results


# -- the machine's own noise -----------------------------------------------------------------


def _stall_meter(seconds: float, conn) -> None:
    """Reads the clock in a loop for `seconds`; sends the longest gap between two readings
    and how many gaps exceeded 1 ms."""
    clock = time.monotonic_ns
    last = clock()
    end = last + int(seconds * 1e9)
    longest, over_1ms = 0, 0
    while last < end:
        now = clock()
        gap = now - last
        if gap > longest:
            longest = gap
        if gap > 1_000_000:
            over_1ms += 1
        last = now
    conn.send((longest, over_1ms))
    conn.close()


def noise_round(seconds: float) -> dict:
    """The control for the contended waits, one round of it: one process per CPU this process
    may run on, each never sleeping and taking no lock, for `seconds`; how long the machine
    (other programs, kernel threads) kept one of them off its CPU at most, and how often for
    over 1 ms. A worker stalled like that while it waits has waited at least that long, and
    with FIFO so has everyone queued behind it."""
    pipes, procs = fork_children(len(os.sched_getaffinity(0)), _stall_meter, (seconds,))
    results = [p.recv() for p in pipes]
    for p in procs:
        p.join()
    return {
        "processes": len(procs),
        "longest": max(r[0] for r in results),
        "over_1ms": sum(r[1] for r in results),
    }


# -- report --------------------------------------------------------------------------------


def duration(ns: float) -> str:
    if ns < 1e3:
        return f"{ns:.0f} ns" if ns >= 10 else f"{ns:.1f} ns"
    if ns < 1e6:
        return f"{ns / 1e3:.3g} µs"
    if ns < 1e9:
        return f"{ns / 1e6:.3g} ms"
    return f"{ns / 1e9:.3g} s"


def loadavg() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def versions(competitors: List[Competitor]) -> str:
    from importlib import metadata

    parts = [f"Python {sys.version.split()[0]}"]
    for dist in ("fairlock", "filelock", "portalocker", "fasteners", "diskcache"):
        if any(c.name.split(".")[0] == dist for c in competitors):
            try:
                parts.append(f"{dist} {metadata.version(dist)}")
            except metadata.PackageNotFoundError:
                parts.append(f"{dist} (not installed)")
    return ", ".join(parts)


def commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True,
            cwd=os.path.dirname(os.path.abspath(__file__)),
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def report(competitors, un, co, args, loads) -> None:
    fl = "fairlock"
    print(f"# Python: fairlock vs threading.Lock, filelock, portalocker, fasteners, diskcache.Lock\n")
    print(f"Commit `{commit()}`; {versions(competitors)}; {len(os.sched_getaffinity(0))} CPUs; "
          f"{'--quick' if args.quick else 'full'} run: {args.rounds} interleaved rounds, "
          f"uncontended {args.seconds} s per round, contended {WORKERS} workers x "
          f"{args.contend_seconds} s per round, critical section {args.cs_us} µs (busy).\n")
    print(f"Load average (1/5/15 min): {' → '.join(loads)} (start → between sections → end).\n")
    print("## Uncontended acquire + release (one thread)\n")
    print("| lock | ns per pair (median) | range of rounds | ÷ fairlock |")
    print("|---|---:|---:|---:|")
    med = {n: statistics.median(v) for n, v in un.items()}
    for c in competitors:
        v = un[c.name]
        ratio = med[c.name] / med[fl] if fl in med else float("nan")
        print(f"| {c.name} | {duration(med[c.name])} | {duration(min(v))} – {duration(max(v))} | {ratio:.3g}× |")
    print()
    print(f"## Contended: {WORKERS} workers, {args.cs_us} µs critical sections\n")
    print("| lock | workers | how it waits | acq/s | min / max share | wait p50 | p99 | max | out of arrival order | out of token order |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|")
    summary = {}
    for c in competitors:
        rs = co[c.name]
        s = {
            "ops": statistics.median(r["ops"] for r in rs),
            "min_share": min(r["min_share"] for r in rs),
            "max_share": max(r["max_share"] for r in rs),
            "p50": statistics.median(r["p50"] for r in rs),
            "p99": statistics.median(r["p99"] for r in rs),
            "max": max(r["max"] for r in rs),
            "out_of_order": sum(r["out_of_order"] * r["n"] for r in rs) / max(1, sum(r["n"] for r in rs)),
            "n": sum(r["n"] for r in rs),
            "token_disorder": None if rs[0]["token_disorder"] is None else sum(r["token_disorder"] for r in rs),
        }
        summary[c.name] = s
        tokens = "—" if s["token_disorder"] is None else f"{s['token_disorder']} of {s['n']}"
        print(f"| {c.name} | {c.workers} | {c.waits} | {s['ops']:,.0f} | {s['min_share']:.1%} / {s['max_share']:.1%} | "
              f"{duration(s['p50'])} | {duration(s['p99'])} | {duration(s['max'])} | {s['out_of_order']:.1%} | {tokens} |")
    print()
    noise = co[NOISE]
    longest = max(r["longest"] for r in noise)
    print("## The machine's own stalls (no lock: the control)\n")
    print(f"Interleaved with the contended rounds, {len(noise)} rounds of {args.contend_seconds:g} s: "
          f"{noise[0]['processes']} processes (one per CPU) that never sleep and take no lock, "
          f"reading the clock. The longest any was kept off its CPU: **{duration(longest)}** "
          f"(per round: {', '.join(duration(r['longest']) for r in noise)}); "
          f"{sum(r['over_1ms'] for r in noise)} stalls over 1 ms in all. A worker stalled like "
          f"that while it waits has waited at least that long, whatever the lock; with FIFO, so "
          f"has everyone queued behind it.\n")
    if fl not in med:
        return
    print("## Ratios (the targets of issue 16)\n")
    print("| peer | uncontended: peer ÷ fairlock | contended longest wait: fairlock ÷ peer | contended throughput: fairlock ÷ peer |")
    print("|---|---:|---:|---:|")
    for c in competitors:
        if c.name == fl:
            continue
        s = summary[c.name]
        wait_ratio = summary[fl]["max"] / s["max"] if s["max"] else float("nan")
        print(f"| {c.name} | {med[c.name] / med[fl]:.3g}× | {wait_ratio:.3g}× | {summary[fl]['ops'] / s['ops']:.3g}× |")
    print()
    print(f"fairlock's longest contended wait ÷ the machine's longest stall (above): "
          f"{summary[fl]['max'] / longest:.3g}×.\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="short rounds (a smoke run)")
    ap.add_argument("--only", nargs="+", metavar="NAME", help="these competitors only")
    args = ap.parse_args()
    args.rounds = 2 if args.quick else 6
    args.seconds = 0.05 if args.quick else 0.3
    args.contend_seconds = 0.3 if args.quick else 2.0
    args.cs_us = 20
    competitors = by_name(args.only) if args.only else COMPETITORS
    loads = [loadavg()]
    with tempfile.TemporaryDirectory(prefix="fairlock-pybench-") as d:
        un = uncontended(competitors, d, args.rounds, args.seconds)
        loads.append(loadavg())
        co = contended(competitors, d, 2 if args.quick else 4, args.contend_seconds, args.cs_us * 1000)
    loads.append(loadavg())
    report(competitors, un, co, args, loads)


if __name__ == "__main__":
    main()
