"""A request is prepared before it reaches the engine's thread (issue 19 item 3): normalization,
segmentation, tokenization of every segment and clip loading run on serving's intake threads
(issue 44, item 4: serving owns the intake), never the caller's nor the worker's, which only
encodes, prefills and steps. And every segment's prompt is checked against the KV cache when the
request is prepared (issue 21 item 3): a clear 400 before any audio, and the job says it was refused."""
from __future__ import annotations

import collections
import os
import re
import threading

import numpy as np
import pytest

from inference import InputError, ReferenceClip, SynthesisRequest
from inference.runtime import prepare as prepare_module
from inference.request.feed import TextFeed
from inference.runtime.engine import warmup_tone
from inference.serving.pool import WorkerPool
from inference.serving.worker import EngineWorker
from inference.text import normalize as tn
from inference.text import spoken as spoken_module

from ..support.app_helpers import load_engine, wait_until
from ..fixtures.engines import StandInEngine

# Segment 2 normalizes to hundreds of words: its prompt alone exceeds the tiny model's 512 positions.
TOO_LONG_LATER = {"text": "Hello there, my friend. " * 12 + " " + "1" * 290 + ". Bye now.", "normalize": True, "max_len": 4}


def recording(calls: collections.defaultdict, kind: str, fn):
    def wrapped(*args, **kwargs):
        calls[kind].add(threading.get_ident())
        return fn(*args, **kwargs)
    return wrapped


def test_the_worker_thread_never_normalizes_segments_tokenizes_or_loads_clips(monkeypatch):
    # Normalized on the intake threads here (a worker's default), so that it can be watched; the app
    # gives its worker a process of its own (the next test).
    engine = load_engine(warmup=False, max_streams=2)
    engine.preparer.segment_weight = 20  # several segments, each a prompt of its own
    calls = collections.defaultdict(set)
    monkeypatch.setattr(tn, "normalize", recording(calls, "normalize", tn.normalize))
    monkeypatch.setattr(tn, "clean_text", recording(calls, "clean_text", tn.clean_text))
    monkeypatch.setattr(spoken_module, "split_segments", recording(calls, "segment", spoken_module.split_segments))
    monkeypatch.setattr(engine.tokenizer, "encode", recording(calls, "tokenize", engine.tokenizer.encode))
    monkeypatch.setattr(prepare_module, "load_audio", recording(calls, "load_audio", prepare_module.load_audio))
    tone = warmup_tone(1.0)
    saved = ReferenceClip(16000, load=recording(calls, "saved_voice", lambda: tone))
    req = SynthesisRequest("I paid $5 on Jan 5. We met at 10:30 and left at 11. " * 3, normalize=True, seed=1, max_len=3,
                           reference_audio=saved, prompt_audio=(16000, tone), prompt_text="Warm up.")
    worker = EngineWorker(engine)
    try:
        job = worker.submit(req)
        audio = np.concatenate(list(job))
        segments = job.status()["segment_count"]
    finally:
        worker.close()
    assert audio.size > 0 and segments >= 3 and job.outcome == "ok"
    assert set(calls) == {"normalize", "clean_text", "segment", "tokenize", "load_audio", "saved_voice"}
    on_worker = sorted(kind for kind, threads in calls.items() if worker.thread_id in threads)
    assert on_worker == [], f"the engine's thread ran {on_worker}"
    intake = {t.ident for t in threading.enumerate() if t.name.startswith("prepare")}
    assert all(threads <= intake for threads in calls.values()), "each on one of serving's intake threads"


def test_a_served_text_is_normalized_in_a_process_of_its_own_and_sounds_the_same(monkeypatch):
    """WeText keeps the GIL for each sentence it reads (text/normalize.Normalizer): a worker's texts,
    and a live request's later clauses, are normalized in a process beside the app, never by this
    process, and speak as they would here."""
    engine = load_engine(warmup=False, max_streams=2)
    engine.preparer.segment_weight = 20
    heard = {}
    for processes in (0, 1):
        calls = collections.defaultdict(set)
        monkeypatch.setattr(tn, "normalize", recording(calls, "normalize", tn.normalize))
        normalizer = tn.Normalizer(processes)
        worker = EngineWorker(engine, normalizer=normalizer)
        try:
            heard[processes] = []  # one job at a time: rows batched together differ in the last bits
            whole = worker.submit(SynthesisRequest("I paid $5 on Jan 5. We met at 10:30 and left at 11.",
                                                   normalize=True, seed=3, max_len=2))
            heard[processes].append((np.concatenate(list(whole)), whole.status()["segment_count"]))
            feed = TextFeed()
            live = worker.submit(SynthesisRequest("I have 3 apples.", normalize=True, seed=4, max_len=2, feed=feed))
            wait_until(lambda: live.state in ("queued", "running"))
            feed.add_text(" They cost $5 on May 2.")  # a later clause, prepared as it comes
            feed.close()
            heard[processes].append((np.concatenate(list(live)), live.status()["segment_count"]))
            pid = normalizer.worker_pid() if processes else None
        finally:
            worker.close()
            normalizer.close()
        assert bool(calls) == (processes == 0), "normalized in this process only when asked to"
    assert pid is not None and pid != os.getpid()
    for (here, segments), (beside, segments_beside) in zip(heard[0], heard[1]):
        assert segments == segments_beside >= 2 and np.array_equal(here, beside)


def test_a_pool_prepares_each_request_once_off_the_callers_thread():
    engines = [StandInEngine(rows=2), StandInEngine(rows=2)]
    pool = WorkerPool(engines)
    try:
        jobs = [pool.submit(SynthesisRequest(f"Request {i}.", seed=i, max_len=2)) for i in range(3)]
        for job in jobs:
            list(job)
    finally:
        pool.close()
    assert sum(len(e.started) for e in engines) == 3
    prepared_on = [t for e in engines for t in e.prepared_on]
    assert len(prepared_on) == 3 and threading.get_ident() not in prepared_on
    assert not {w.thread_id for w in pool.workers} & set(prepared_on)


def test_an_input_error_refuses_the_job_with_its_reason_and_holds_nothing():
    engine = load_engine(warmup=False, max_streams=2)
    worker = EngineWorker(engine)
    try:
        job = worker.submit(SynthesisRequest(**TOO_LONG_LATER), job_id="too-long")
        assert job.next_event(60)[0] == "error"
        assert isinstance(job.refusal, InputError) and re.search(r"segment 2 of 3 .* 511", str(job.refusal))
        status = worker.get("too-long").status()
        assert status["state"] == "refused" and status["outcome"] == "input_error" and "511" in status["error"]
        assert worker.held == 0 and job.started_at is None
    finally:
        worker.close()


@pytest.fixture(scope="module")
def app(serve_app):
    return serve_app(max_queue=2)


def test_a_later_segment_too_long_for_the_cache_is_refused_before_any_audio(client):
    response = client.post("/voxcpm/stream?format=frames", json={**TOO_LONG_LATER, "request_id": "too-long-1"})
    assert response.status_code == 400, response.content[:300]
    message = response.text
    assert "segment 2 of 3" in message and "511" in message and "positions" in message
    assert "normalization off" in message and "shorten" in message
    job = client.get("/voxcpm/jobs/too-long-1")  # what the page asks after a refusal: the job, and why
    assert job.status_code == 200 and job.json()["state"] == "refused" and "511" in job.json()["error"]
    fine = client.post("/voxcpm/stream?format=frames", json={**TOO_LONG_LATER, "text": "Hello there. Bye now."})
    assert fine.status_code == 200
