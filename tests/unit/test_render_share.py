"""The pieces behind an offline render's limits, without a model: the worker's calls taken one per
turn, the store's cache of finished renders, the caps on renders, and a render's parts shared by
its readers (all of them kept, or only what the slowest has not read)."""
from __future__ import annotations

import asyncio
import io
import time

import numpy as np
import pytest
import soundfile as sf

from inference.serving.worker import EngineCalls, run_calls
from inference.serving.latent_store import LatentStore
from ui.guard.answers import Refusal
from ui.services.audio import pcm16, wav_header
from ui.services.renders import Lease, Render, RenderSlots


def test_the_worker_takes_one_call_per_turn_oldest_first():
    calls = EngineCalls()
    futures = [calls.add(lambda engine, i=i: (engine, i), "render") for i in range(3)]
    taken = calls.take(None, False)
    assert len(taken) == 1 and calls  # the others wait for the next turn, after a step
    run_calls(taken, "engine")
    assert futures[0].result(timeout=1) == ("engine", 0) and not futures[1].done()
    run_calls(calls.take(None, False), "engine")
    calls.refuse(RuntimeError("closing"))
    assert futures[1].result(timeout=1) == ("engine", 1) and not calls
    with pytest.raises(RuntimeError, match="closing"):
        futures[2].result(timeout=1)


def test_a_call_waits_while_a_listener_has_less_audio_than_it_takes_or_a_first_audio_is_awaited():
    calls = EngineCalls(max_wait_s=0.3)
    slow = calls.add(lambda engine: time.sleep(0.05), "render")
    run_calls(calls.take(None, False), "engine", calls)  # nobody plays: it runs, and its cost is learned
    assert slow.done() and 0.04 < calls.costs["render"] < 0.5
    calls.add(lambda engine: "again", "render")
    assert calls.take(0.01, False) == [], "a listener holds 10 ms: a 50 ms call would starve it"
    assert calls.take(5.0, True) == [], "a job waits for its first audio"
    assert len(calls.take(5.0, False)) == 1, "room for it: it runs"
    calls.add(lambda engine: "starved?", "render")
    assert calls.take(0.01, True) == []
    time.sleep(0.35)
    assert len(calls.take(0.01, True)) == 1, "waited max_wait_s: it runs regardless"
    calls.add(lambda engine: "new kind", "encode")
    assert len(calls.take(0.01, False)) == 1, "a kind not yet measured is taken as free"


def test_the_store_caches_renders_only_of_the_latents_it_keeps():
    now = [0.0]
    store = LatentStore(max_bytes=64 * 1024, ttl_s=10.0, clock=lambda: now[0], max_render_bytes=4000)
    patch = np.zeros((64, 4), np.float32)
    for job in "abc":
        store.keep(job, [patch], None)
    first = store.get("a")
    assert store.cacheable(1000) and not store.cacheable(1001)  # one render: a quarter of the cap at most
    assert store.keep_render("a", first, b"a" * 1000) and store.render("a") == b"a" * 1000
    assert not store.keep_render("b", store.get("b"), b"b" * 1001) and store.render("b") is None
    store.keep("a", [patch], None)  # the job's latents replaced: its render goes, an old one is refused
    assert store.render("a") is None and not store.keep_render("a", first, b"x") and store.render_bytes == 0
    for job in "abc":
        assert store.keep_render(job, store.get(job), job.encode() * 1000)
    store.render("a")  # asked for: the least recently asked for is now b
    store.keep("d", [patch], None)
    store.keep_render("d", store.get("d"), b"d" * 1000)
    store.keep_render("d", store.get("d"), b"d" * 1000)  # again: replaces, does not count twice
    assert store.render_bytes == 4000
    store.keep("e", [patch], None)
    store.keep_render("e", store.get("e"), b"e" * 1000)
    assert store.render("b") is None and store.render("a") and store.render_bytes == 4000
    now[0] = 10.0
    assert store.render("a") is None and store.render_bytes == 0 and len(store) == 0


def test_a_wav_header_of_known_length_reads_back_with_its_info():
    audio = np.sin(np.arange(4801) / 10.0) * 0.5
    header = wav_header(48000, len(audio), {b"INAM": "title é", b"ISFT": "soft", b"ICMT": '{"a":1}'})
    with sf.SoundFile(io.BytesIO(header + pcm16(audio))) as wav:
        assert (wav.title, wav.software, wav.comment) == ("title é", "soft", '{"a":1}')
        assert wav.frames == 4801 and wav.samplerate == 48000 and wav.subtype == "PCM_16"
        got = wav.read(dtype="int16")
    assert np.array_equal(got, np.rint(audio * 32767).astype(np.int16))


def test_renders_beyond_a_cap_are_refused_with_a_retry_after():
    slots = RenderSlots(max_decodes=1, per_client=1, retry_s=2)
    slots.check("c", decode=True)
    slots.decode_started()
    with pytest.raises(Refusal) as busy:
        slots.check("c", decode=True)
    assert busy.value.status == 503 and busy.value.headers == {"Retry-After": "2"}
    slots.check("c", decode=False)  # joining a render in progress takes no decode

    async def main():
        render = Render(None, retry_s=2, unread_pieces=2)
        lease = Lease(slots, "c", render)
        with pytest.raises(Refusal) as many:
            slots.check("c", decode=False)
        assert many.value.status == 429 and many.value.headers == {"Retry-After": "2"}
        slots.check("d", decode=False)  # another client's share
        body = render.read(lease)
        del lease, body  # a response dropped before it was ever read gives its place back
        slots.check("c", decode=False)
        assert render.positions == {} and not slots.readers

    asyncio.run(main())


def test_a_render_too_long_to_keep_holds_only_what_its_slowest_reader_has_not_read():
    async def main():
        slots = RenderSlots(4, 4, 2)
        render = Render(None, retry_s=2, unread_pieces=2)
        fast, slow = Lease(slots, "a", render), Lease(slots, "b", render)
        render.add(b"header")
        render.stop_keeping()
        fast_body, slow_body = render.read(fast), render.read(slow)
        render.add(b"one")
        assert [await anext(fast_body), await anext(fast_body)] == [b"header", b"one"]
        room = asyncio.ensure_future(render.room())
        await asyncio.sleep(0)
        assert not room.done() and render.parts == [b"header", b"one"]  # the slow reader has read nothing
        assert await anext(slow_body) == b"header"
        await asyncio.sleep(0)
        assert room.done() and render.parts == [b"one"] and render.base == 1
        render.end()
        assert [part async for part in slow_body] == [b"one"] and [part async for part in fast_body] == []
        assert not slots.readers and render.positions == {}

    asyncio.run(main())


def test_readers_that_have_every_byte_end_at_once_and_leave_the_render_to_be_cached():
    """A client that has the Content-Length it was promised closes the connection; the decode's
    last step (the end of its time-stretch, then the cache) may still be on its way. Its leaving
    must not cancel a render that is all made: the cache would never get it, and the next GET
    would decode it all again."""
    async def main():
        slots = RenderSlots(4, 4, 2)
        render = Render(None, retry_s=2, unread_pieces=2)
        finishing = asyncio.Event()
        render.task = asyncio.ensure_future(finishing.wait())  # the decode's last step, not yet done
        lease = Lease(slots, "a", render)
        body = render.read(lease)
        render.size = len(b"header") + len(b"audio")
        render.add(b"header")
        render.add(b"audio")
        async def whole():
            return [part async for part in body]
        # It ends once it has every byte, without waiting for end().
        assert await asyncio.wait_for(whole(), timeout=5) == [b"header", b"audio"]
        await asyncio.sleep(0)
        assert render.positions == {} and not render.task.cancelled()
        finishing.set()
        await render.task

    asyncio.run(main())
