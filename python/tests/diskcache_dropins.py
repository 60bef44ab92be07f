"""A pytest plugin (``-p diskcache_dropins``) that replaces diskcache's lock recipes by
fairlock's drop-ins before any test module imports diskcache, so that diskcache's own tests
run against ours (tests/test_diskcache.py runs its ``tests/test_recipes.py`` this way)."""

import diskcache

import fairlock.diskcache as ours

for _name in ("Lock", "RLock", "BoundedSemaphore"):
    setattr(diskcache, _name, getattr(ours, _name))


def pytest_report_header(config):
    replaced = [n for n in ("Lock", "RLock", "BoundedSemaphore") if getattr(diskcache, n).__module__ == ours.__name__]
    return "fairlock drop-ins: " + " ".join(replaced)
