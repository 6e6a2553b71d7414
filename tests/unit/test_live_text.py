"""A live request (issue 46): text that arrives clause by clause while the stream speaks. Its
later clauses join the same row and voice (inference/request/feed.py, Continuation.resume): fed
ahead, the audio is the whole text's sample for sample; fed late, the stream waits with its
voice kept (its row runs on with the batch meanwhile) and goes on exactly as if it had not
waited; it ends once its feed closes."""
from __future__ import annotations

import itertools
import time

import numpy as np
import pytest

from inference import Engine, SynthesisRequest
from inference.request.feed import TextFeed
from tests.support.app_helpers import wait_until
from tests.unit.test_golden_parity import CKPT

CLAUSES = ["The quick brown fox jumps over the dog.", " It was a sunny day in May.", " Then the rain came down hard."]


@pytest.fixture(scope="module")
def engine():
    engine = Engine.from_pretrained(str(CKPT), device="cpu", dtype="float32", warmup=False, max_streams=3)
    engine.preparer.segment_weight = 40  # one sentence a segment: the whole text cuts where the clauses do
    return engine


def neighbour(engine):
    """A stream in the row after the request's that runs through the whole test (one long segment,
    stopped by its length cap only), so every batch covers the request's row, parked or not, and
    batches have the same shape in every run."""
    text = "another voice speaks in the next row all along, " * 6
    engine.preparer.segment_weight = 10_000
    prepared = engine.prepare(SynthesisRequest(text=text, seed=9, min_len=480, max_len=480))
    engine.preparer.segment_weight = 40
    return engine.start(prepared)


def speak(engine, feed_at: dict[int, list[str]] | None = None, close_at: int | None = None, beside: bool = False,
          clauses: list[str] = CLAUSES):
    """The three clauses as one live request (`feed_at`: the step before which each later clause is
    added; the feed closes before step `close_at`), or with `feed_at` None as one whole text.
    Returns (its chunks, the steps it spent parked)."""
    feed = None if feed_at is None else TextFeed()
    text = "".join(clauses) if feed is None else clauses[0]
    prepared = engine.prepare(SynthesisRequest(text=text, seed=5, feed=feed))
    stream = engine.start(prepared)
    other = neighbour(engine) if beside else None
    said, chunks, parked, step = [clauses[0]], [], 0, 0
    while not stream.done:
        for clause in (feed_at or {}).get(step, []):
            feed.add_text(clause)
            said.append(clause)
        if feed is not None and step == close_at:
            feed.close()
        parked += stream in engine.scheduler.parked
        for s, made in engine.step():
            if s is stream:
                chunks += made
        step += 1
        assert step < 2000, "the stream never ended"
    assert stream.error is None
    if other is not None:
        engine.stop(other)
    return chunks, parked


def same_audio(chunks, reference) -> bool:
    return len(chunks) == len(reference) and all(np.array_equal(c.audio, r.audio) for c, r in zip(chunks, reference))


def test_clauses_fed_ahead_speak_exactly_as_the_whole_text(engine):
    chunks, parked = speak(engine, {0: CLAUSES[1:]}, close_at=0)
    assert parked == 0 and same_audio(chunks, speak(engine)[0])
    assert sorted({c.segment for c in chunks}) == [0, 1, 2]


def test_a_stream_that_waits_for_text_keeps_its_voice_and_goes_on_as_if_it_had_not_waited(engine):
    # Each clause comes long after the one before has been spoken; another stream runs in the next
    # row all along, so the waiting row runs on with every batch.
    chunks, parked = speak(engine, {150: [CLAUSES[1]], 300: [CLAUSES[2]]}, close_at=300, beside=True)
    assert parked > 100 and same_audio(chunks, speak(engine, beside=True)[0])


def test_a_live_stream_ends_when_its_feed_closes_and_a_pause_it_is_sent_is_heard(engine):
    chunks, _ = speak(engine, {60: [" [pause 320ms] And one more."]}, close_at=200)
    pauses = [c for c in chunks if c.pause]
    assert sum(len(c.audio) for c in pauses) == round(0.32 * engine.sample_rate)
    assert all(not c.audio.any() for c in pauses)
    assert chunks[-1].segment == 1 and not chunks[-1].pause


def test_pauses_in_clauses_fed_together_are_heard_where_and_as_long_as_in_the_whole_text(engine):
    # The third clause opens with a pause: taken with the second, its silence once went out at once,
    # ahead of the second clause's speech, and again where it belongs.
    clauses = [CLAUSES[0], " It was sunny. [pause 200ms] It was May.", " [pause 480ms] Then the rain came down."]
    whole, _ = speak(engine, clauses=clauses)
    live, _ = speak(engine, {0: clauses[1:]}, close_at=0, clauses=clauses)
    silences = [sum(len(c.audio) for c in group) for pause, group in itertools.groupby(live, lambda c: c.pause) if pause]
    assert silences == [round(0.2 * engine.sample_rate), round(0.48 * engine.sample_rate)]
    assert [(c.segment, c.pause, len(c.audio)) for c in live] == [(c.segment, c.pause, len(c.audio)) for c in whole]
    assert all(not c.audio.any() for c in live if c.pause)


def test_a_feed_closed_with_nothing_more_ends_the_stream_after_its_first_clause(engine):
    chunks, parked = speak(engine, {}, close_at=0)
    assert parked == 0 and chunks and {c.segment for c in chunks} == {0}


class CountingSteps:
    """The real engine through the worker, counting its steps."""

    def __init__(self, engine):
        self.engine, self.steps = engine, 0

    def __getattr__(self, name):
        return getattr(self.engine, name)

    def step(self):
        self.steps += 1
        return self.engine.step()


def test_through_the_worker_a_live_job_waits_for_text_without_spinning_and_ends_with_its_feed(engine):
    from inference.serving.worker import EngineWorker

    counting = CountingSteps(engine)
    worker = EngineWorker(counting)
    try:
        feed = TextFeed()
        job = worker.submit(SynthesisRequest(text=CLAUSES[0], seed=5, feed=feed))
        samples = []
        while True:  # its first clause, until the stream waits for more
            event = job.next_event(timeout=60)
            assert event is not None and event[0] == "chunk"
            samples.append(event[1].chunk.audio)
            if event[1].chunk.index == 3:
                break
        wait_until(lambda: not engine.working)
        before = counting.steps
        time.sleep(0.5)
        assert counting.steps - before <= 10, "the worker stepped an engine with nothing to do"
        feed.add_text(CLAUSES[1])
        feed.close()
        samples += list(job)
        assert job.state == "done" and job.status()["segment_count"] == 2
        assert job.status()["spoken_text"] == CLAUSES[0] + CLAUSES[1]
        reference = engine.synthesize(SynthesisRequest(text=CLAUSES[0] + CLAUSES[1], seed=5))
        assert np.array_equal(np.concatenate(samples), reference)
    finally:
        worker.close()


def test_text_that_cannot_be_spoken_is_refused_at_once_and_the_stream_goes_on(engine):
    from inference.errors import InputError
    from inference.serving.worker import EngineWorker

    worker = EngineWorker(engine)
    try:
        feed = TextFeed()
        job = worker.submit(SynthesisRequest(text=CLAUSES[0], seed=5, feed=feed))
        assert job.next_event(timeout=60)[0] == "chunk"
        with pytest.raises(InputError, match="limit"):
            feed.add_text("x" * (engine.max_text_chars + 1))
        feed.add_text(CLAUSES[1])
        feed.close()
        list(job)
        assert job.state == "done" and job.status()["segment_count"] == 2
    finally:
        worker.close()


def test_a_later_clause_reads_the_last_one_as_spoken_so_normalized_text_continues_as_the_whole_does(engine):
    # The tail a clause's prompt continues from is the clause before as spoken ("three", not "3"):
    # fed the text as sent, its prompt would fall back to the voice alone and sound otherwise.
    from inference.serving.worker import EngineWorker

    first, second = "I have 3 apples and 12 pears.", " They cost $5 in all, on May 2."
    worker = EngineWorker(engine)
    try:
        feed = TextFeed()
        job = worker.submit(SynthesisRequest(text=first, seed=5, normalize=True, feed=feed))
        wait_until(lambda: job.state in ("queued", "running"))
        feed.add_text(second)
        feed.close()
        live = np.concatenate(list(job))
        whole = engine.synthesize(SynthesisRequest(text=first + second, seed=5, normalize=True))
        assert job.status()["segment_count"] == 2 and np.array_equal(live, whole)
    finally:
        worker.close()
