"""What ``acquire_async()`` returns: a coroutine around the native acquisition's asyncio future
(crates/fairlock-python/src/async_acquire.rs)."""

import asyncio
from typing import Any, Callable


async def acquired(future: "asyncio.Future[Any]", release: Callable[[], None]) -> bool:
    """Awaits ``future`` (True once the grant is the lock object's, False at a timeout). If
    the awaiting task is cancelled after the grant arrived but before it resumed, the grant is
    given back (``release``) before the cancellation goes on, as ``asyncio.Lock`` does:
    otherwise the lock would stay held by nobody's code. (A task cancelled before the grant
    cancels ``future``, which gives its place in line up.)"""
    try:
        return bool(await future)
    except asyncio.CancelledError:
        if future.done() and not future.cancelled() and future.exception() is None:
            if future.result():
                release()
        raise
