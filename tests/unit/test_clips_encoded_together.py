"""Clips of requests joining in one step go through the VAE encoder together (issue 19 item 3):
fewer encoder calls, and the same patches and audio as each clip encoded alone."""
from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from inference import ReferenceClip, SynthesisRequest
from inference.runtime.prepare import batches, unencoded
from inference.serving.worker import EngineWorker
from ui.library.uploads import decode_audio

from ..fixtures.engines import CountingEncoder
from ..support.app_helpers import load_engine, reference_engine, wait_until

VOICE = Path(__file__).resolve().parents[2] / "assets" / "voices" / "guide_en.wav"
TEXT = "Hello world, this is a test."


@pytest.fixture(scope="module")
def engine():
    engine = load_engine()
    engine.counter = CountingEncoder(engine)
    return engine


def clips(n: int) -> list[tuple[int, np.ndarray]]:
    """n clips of different lengths (1.5 s, 2.2 s, ...) cut from one voice."""
    rate, audio = decode_audio(VOICE.read_bytes(), max_seconds=60)
    return [(rate, audio[: int(rate * (1.5 + 0.7 * k))]) for k in range(n)]


def cloning(clip, seed: int) -> SynthesisRequest:
    return SynthesisRequest(TEXT, reference_audio=clip, seed=seed, max_len=3)


def test_batched_patches_equal_each_clip_encoded_alone(engine):
    prepared = [engine.prepare(cloning(c, 1)) for c in clips(3)]
    hosts = [p.reference for p in prepared]
    alone = [engine.preparer.encode(h.audio) for h in hosts]
    together = engine.preparer.encode_many([h.audio for h in hosts])
    for a, b in zip(alone, together):
        assert a.shape == b.shape
        np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=0, atol=1e-5)


def test_joiners_clips_take_one_encoder_call_and_give_the_solo_audio(engine):
    requests = [cloning(c, seed) for seed, c in enumerate(clips(3), start=1)]
    worker = EngineWorker(engine)
    inside, gate = threading.Event(), threading.Event()
    try:
        # The worker's thread waits in a call until all three are in line, so they join in one step.
        # Submitting only once it is inside the call: a thread slow to wake would otherwise take the
        # call and the first joiners from the line together, and the last one a step later.
        held = worker.call(lambda _: (inside.set(), gate.wait(30)))
        assert inside.wait(30), "the worker never ran the call"
        before = len(engine.counter.rows)
        jobs = [worker.submit(r) for r in requests]
        wait_until(lambda: all(job.state == "queued" for job in jobs), timeout=30)  # prepared, in line
        gate.set()
        held.result(30)
        got = [np.concatenate(list(job)) for job in jobs]
    finally:
        gate.set()
        worker.close()
    assert engine.counter.rows[before:] == [3]  # one encoder call for the three clips
    for request, audio in zip(requests, got):
        want = reference_engine().synthesize(request)
        assert audio.shape == want.shape and np.linalg.norm(audio - want) / np.linalg.norm(want) < 1e-5


def test_one_saved_voice_for_many_joiners_is_encoded_once(engine):
    rate, audio = clips(1)[0]
    voice = ReferenceClip(rate, audio)
    prepared = [engine.prepare(cloning(voice, s)) for s in (1, 2, 3)]
    assert len(unencoded([p.reference for p in prepared])) == 1
    other = engine.prepare(cloning(clips(2)[1], 4))
    before = len(engine.counter.rows)
    engine.preparer.encode_ahead(prepared + [other])
    assert engine.counter.rows[before:] == [2]  # the voice once and the other clip, together
    assert voice.latents(prepared[0].reference.key) is not None


def test_batches_keep_the_padded_size_within_the_budget():
    class Host:
        def __init__(self, n):
            self.audio = np.zeros(n, np.float32)
    hosts = [Host(n) for n in (100, 400, 300, 50, 250)]
    groups = batches(hosts, budget=800)
    assert sorted(len(h.audio) for g in groups for h in g) == [50, 100, 250, 300, 400]
    assert all(len(g) * len(g[0].audio) <= 800 or len(g) == 1 for g in groups)
    assert [len(h.audio) for h in groups[0]] == [400, 300]  # longest first
