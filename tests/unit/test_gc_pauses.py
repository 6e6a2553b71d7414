"""The serving process's garbage collector (inference/serving/gc_pauses.py): settled after warm-up
so that a full collection no longer walks the loaded app, and every pause counted for /metrics."""
from __future__ import annotations

import gc
import logging
import time
import weakref

import pytest

from inference.serving import gc_pauses


class Node:
    me = None


@pytest.fixture
def unfrozen():
    serving = gc_pauses.watch().serving
    yield
    gc.unfreeze()  # the rest of the test process collects as it did, unlogged
    gc_pauses.watch().serving = serving


def test_settle_sets_every_live_object_aside_and_frees_the_garbage(unfrozen):
    gc_pauses.watch().serving = False
    alive = [[i] for i in range(50_000)]
    cycle = Node()
    cycle.me = cycle  # garbage only a collection finds: frozen uncollected, it would live for good
    garbage = weakref.ref(cycle)
    del cycle
    before = gc.get_freeze_count()
    frozen = gc_pauses.settle()
    # Afterwards the frozen set can only shrink (another thread's frozen objects may die meanwhile),
    # and it still holds every object this test keeps alive.
    assert frozen >= gc.get_freeze_count() >= before + len(alive)
    walked = {id(o) for o in gc.get_objects()}  # what later collections still look at
    assert not any(id(item) in walked for item in alive[:: 1000])
    later = [[i] for i in range(10)]
    assert id(later[0]) in {id(o) for o in gc.get_objects()}, "what requests make later is still collected"
    assert garbage() is None, "settle collects before it freezes"
    assert gc_pauses.watch().serving, "long pauses are logged once the app serves"


def test_the_watch_counts_each_collection_of_each_generation():
    watch = gc_pauses.watch()
    assert gc.callbacks.count(watch) == 1 and gc_pauses.watch() is watch and gc.callbacks.count(watch) == 1
    before = watch.snapshot()
    gc.collect(2)
    gc.collect(0)
    after = watch.snapshot()
    assert after["count"][2] == before["count"][2] + 1
    assert after["count"][0] >= before["count"][0] + 1
    assert after["seconds"][2] > before["seconds"][2]
    assert after["longest"][2] >= after["seconds"][2] - before["seconds"][2] > 0


def test_a_long_pause_is_logged_with_its_length(caplog):
    watch = gc_pauses.PauseWatch()  # fed by hand: a real 60 ms collection cannot be made on demand
    with caplog.at_level(logging.WARNING, logger="voxcpm.gc"):
        watch("start", {"generation": 2})  # while the app loads: counted, not logged
        time.sleep(gc_pauses.LONG_S + 0.01)
        watch("stop", {"generation": 2, "collected": 1})
        assert not caplog.records
        watch.serving = True
        watch("start", {"generation": 2})
        time.sleep(gc_pauses.LONG_S + 0.01)
        watch("stop", {"generation": 2, "collected": 7})
        watch("start", {"generation": 0})
        watch("stop", {"generation": 0, "collected": 0})
    seen = watch.snapshot()
    assert seen["count"] == [1, 0, 2] and seen["longest"][2] > gc_pauses.LONG_S
    logged = [r.getMessage() for r in caplog.records if r.name == "voxcpm.gc"]
    assert len(logged) == 1 and logged[0].startswith("garbage collection of generation 2 held every thread for ")
    assert logged[0].endswith(" ms (7 objects freed)")


def test_a_stop_without_its_start_is_ignored():
    watch = gc_pauses.PauseWatch()
    watch("stop", {"generation": 1, "collected": 0})  # installed while a collection ran
    assert watch.snapshot()["count"] == [0, 0, 0]
