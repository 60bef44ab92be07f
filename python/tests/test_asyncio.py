"""asyncio: ``await lock.acquire_async()`` and ``async with lock:`` (``fairlock.Lock``, the
sides of a ``fairlock.RWLock``, a ``fairlock.Semaphore``'s permits), waiting without blocking the event loop, in arrival order,
and giving the place up at once when the awaiting task is cancelled."""

import asyncio
import gc
import threading
import time

import pytest

import fairlock
from conftest import wait_until, waiters


def run(coro):
    return asyncio.run(coro)


def test_async_with_holds_and_releases(lock_path):
    lock = fairlock.Lock(lock_path)

    async def main():
        async with lock:
            assert lock.locked()
            assert lock.token > 0
            await asyncio.sleep(0)
        assert not lock.locked()
        assert await lock.acquire_async() is True
        lock.release()

    run(main())


def test_the_event_loop_runs_while_a_task_waits(lock_path):
    lock = fairlock.Lock(lock_path)
    other = fairlock.Lock(lock_path)
    assert other.acquire()
    ticks = []

    async def ticker():
        for _ in range(20):
            ticks.append(time.monotonic())
            await asyncio.sleep(0.005)

    async def main():
        waiting = asyncio.ensure_future(lock.acquire_async())
        # Released by another thread while the loop keeps ticking.
        threading.Timer(0.1, other.release).start()
        await ticker()
        assert await waiting is True
        lock.release()

    run(main())
    assert len(ticks) == 20, "the loop was blocked while a task waited"


def test_tasks_are_served_in_the_order_they_asked(lock_path):
    holder = fairlock.Lock(lock_path)
    assert holder.acquire()
    lock = fairlock.Lock(lock_path)
    order = []

    async def task(i):
        async with lock:
            order.append((i, lock.token))
            await asyncio.sleep(0.001)

    async def main():
        tasks = []
        for i in range(8):
            tasks.append(asyncio.ensure_future(task(i)))
            await asyncio.sleep(0)  # the task starts, and takes its place in line
        # Each place was taken at the task's first step; its waiter thread shows it in the
        # file (publishes it) a moment later.
        wait_until(lambda: waiters(lock_path) == 8)
        holder.release()
        await asyncio.gather(*tasks)

    run(main())
    assert [i for i, _ in order] == list(range(8))
    tokens = [t for _, t in order]
    assert tokens == sorted(tokens)


def test_a_cancelled_wait_gives_its_place_up_at_once(lock_path):
    holder = fairlock.Lock(lock_path)
    assert holder.acquire()
    lock = fairlock.Lock(lock_path)

    async def main():
        for _ in range(50):
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(lock.acquire_async(), 0.001)
        task = asyncio.ensure_future(lock.acquire_async())
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    run(main())
    assert waiters(lock_path) == 0, "a cancelled wait left its ticket in line"
    assert not lock.locked() or holder.locked()
    holder.release()
    # Idle: a non-blocking acquire succeeds at once.
    assert lock.acquire(blocking=False)
    lock.release()


def test_a_timeout_returns_false(lock_path):
    holder = fairlock.Lock(lock_path)
    assert holder.acquire()
    lock = fairlock.Lock(lock_path)

    async def main():
        t0 = time.monotonic()
        assert await lock.acquire_async(timeout=0.05) is False
        assert time.monotonic() - t0 >= 0.05

    run(main())
    holder.release()

    async def negative():
        with pytest.raises(ValueError):
            await lock.acquire_async(timeout=-1)

    run(negative())


def test_a_killed_holder_process_hands_the_lock_to_an_async_waiter(lock_path, peers):
    peer = peers(lock_path)
    assert peer.call("acquire").startswith("acquired"), "the peer holds"
    lock = fairlock.Lock(lock_path)

    async def main():
        waiting = asyncio.ensure_future(lock.acquire_async())
        await asyncio.sleep(0.05)
        peer.kill()
        assert await asyncio.wait_for(waiting, 10) is True
        assert lock.owner_died
        lock.release()

    run(main())


def test_rwlock_sides_wait_asynchronously(lock_path):
    rw = fairlock.RWLock(lock_path)
    other = fairlock.RWLock(lock_path)

    async def main():
        async with rw.read():
            # Another reader shares; a writer waits.
            assert await other.read().acquire_async() is True
            writing = asyncio.ensure_future(other.write().acquire_async())
            await asyncio.sleep(0.02)
            assert not writing.done()
            other.read().release()
        assert await asyncio.wait_for(writing, 5) is True
        other.write().release()

    run(main())


def test_acquire_async_needs_a_running_loop(lock_path):
    lock = fairlock.Lock(lock_path)
    with pytest.raises(RuntimeError):
        lock.acquire_async()


def test_a_task_cancelled_after_its_grant_arrived_gives_it_back(lock_path):
    """What ``async with asyncio.timeout(t): async with lock:`` (or 3.12's ``wait_for``) does
    when the timeout fires in the loop iteration that delivers the grant: the task is
    cancelled once the result is set, and the grant must not stay with nobody."""
    holder = fairlock.Lock(lock_path)
    assert holder.acquire()
    lock = fairlock.Lock(lock_path)

    async def take():
        async with lock:
            pytest.fail("the body never runs: the task is cancelled")

    async def main():
        loop = asyncio.get_running_loop()
        task = asyncio.ensure_future(take())
        await asyncio.sleep(0.02)  # the task waits in line
        holder.release()  # the waiter thread is granted and schedules the poll
        time.sleep(0.2)  # (blocking the loop) the poll is now in the loop's ready queue
        loop.call_soon(task.cancel)  # after the poll sets the result, before the task resumes
        with pytest.raises(asyncio.CancelledError):
            await task

    run(main())
    assert not lock.locked(), "a cancelled `async with lock:` left the lock held"


def test_a_loop_closed_while_a_task_waits_gives_the_grant_back(lock_path):
    holder = fairlock.Lock(lock_path)
    assert holder.acquire()
    lock = fairlock.Lock(lock_path)
    loop = asyncio.new_event_loop()

    async def start():
        asyncio.ensure_future(lock.acquire_async())
        await asyncio.sleep(0.02)  # waiting in line

    loop.run_until_complete(start())
    loop.close()  # the waiting task is abandoned, not cancelled
    del loop
    gc.collect()
    holder.release()  # the grant goes to the abandoned acquisition, which gives it back
    deadline = time.monotonic() + 5
    while not holder.acquire(blocking=False):
        assert time.monotonic() < deadline, "the lock stays held by an acquisition nobody sees"
        gc.collect()
        time.sleep(0.01)
    holder.release()


def test_semaphore_permits_are_awaited_in_order(lock_path):
    """``fairlock.Semaphore``: ``async with sem:`` and ``acquire_async()`` wait for a permit
    without blocking the loop, granted in the order the tasks asked, at most ``value`` holders
    at once; a permit taken by a task is the object's, released by ``release()``."""
    sem = fairlock.Semaphore(lock_path, 2)
    other = fairlock.Semaphore(lock_path, 2)
    assert other.acquire() and other.acquire()  # both permits held elsewhere
    order = []
    inside = []
    most = [0]

    async def worker(i):
        async with sem:
            inside.append(i)
            most[0] = max(most[0], len(inside))
            order.append(i)
            await asyncio.sleep(0.01)
            inside.remove(i)

    async def main():
        tasks = []
        for i in range(6):
            tasks.append(asyncio.ensure_future(worker(i)))
            await asyncio.sleep(0)  # each task takes its place before the next starts
        await asyncio.sleep(0.05)
        assert order == [], "a task went in while both permits were held elsewhere"
        wait_until(lambda: waiters(lock_path) == 6)
        other.release(2)
        await asyncio.gather(*tasks)
        assert await sem.acquire_async(timeout=1) is True
        assert sem.held == 1 and sem.token > 0
        sem.release()

    run(main())
    # Granted in the order asked, two at a time: the two permits released together go to
    # tasks 0 and 1 (which of them runs first is the loop's choice), each later permit to the
    # next task in line as a holder leaves (10 ms apart).
    assert [sorted(order[k : k + 2]) for k in (0, 2, 4)] == [[0, 1], [2, 3], [4, 5]], order
    assert most[0] == 2
    assert sem.held == 0
    assert other.acquire(blocking=False) and other.acquire(blocking=False)
    other.release(2)


def test_a_cancelled_semaphore_wait_gives_its_place_up(lock_path):
    sem = fairlock.Semaphore(lock_path, 1)
    holder = fairlock.Semaphore(lock_path, 1)
    assert holder.acquire()

    async def main():
        for _ in range(20):
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(sem.acquire_async(), 0.001)
        assert await sem.acquire_async(timeout=0.01) is False

    run(main())
    assert waiters(lock_path) == 0, "a cancelled wait left its ticket in line"
    assert sem.held == 0
    holder.release()
    assert sem.acquire(blocking=False)
    sem.release()
