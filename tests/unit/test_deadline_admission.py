"""Deadline-aware admission (inference/runtime/scheduler.py) on the tiny model, with a fake clock
and a fake device time: a step takes STEP_S, a prefill JOIN_S per joining stream. A burst that
joins 30 running streams is split across steps so that no running listener's buffer runs dry,
and a joining stream's first chunk comes one step after its prefill."""
from __future__ import annotations

import pytest

from inference import Engine, SynthesisRequest
from inference.runtime.scheduler import WAY_TO_LISTENER_S

from ..support.app_helpers import on_fake_device_time, step_into, tiny_checkpoint

STEP_S, JOIN_S = 0.08, 0.05  # a patch is 0.16 s of audio: the running streams gain 0.08 s a step
TEXT = "Hello world, this is a test."


@pytest.fixture()
def engine(monkeypatch):
    engine = Engine.from_pretrained(tiny_checkpoint(), device="cpu", dtype="float32", warmup=False, max_streams=48)
    engine.clock = on_fake_device_time(engine, monkeypatch, STEP_S, JOIN_S)
    engine.prefilled = engine.clock.prefilled  # the rows of each prefill, in order
    return engine


class Timeline:
    """When each stream got each of its chunks: (step, clock) pairs, by stream."""

    def __init__(self, engine):
        self.engine, self.steps, self.got = engine, 0, {}

    def start(self, seed: int, patches: int = 60):
        stream = self.engine.start(SynthesisRequest(TEXT, seed=seed, min_len=patches, max_len=patches))
        self.got[stream] = []
        return stream

    def step(self):
        produced = self.engine.step()
        self.steps += 1
        for stream, chunks in produced:
            if stream in self.got:
                self.got[stream] += [(self.steps, self.engine.clock())] * len(chunks)


def assert_never_dry(got: list[tuple[int, float]], patch_s: float, label: str):
    """Each chunk after the first comes one step after the one before, and before the listener
    has played everything released until then (its buffer never runs dry)."""
    steps, times = [s for s, _ in got], [t for _, t in got]
    assert all(b - a == 1 for a, b in zip(steps, steps[1:])), f"{label}: chunks at steps {steps}"
    for i in range(1, len(times)):
        deadline = times[0] + i * patch_s
        assert times[i] <= deadline + 1e-9, f"{label}: chunk {i} came {times[i] - deadline:.3f} s after the buffer ran dry"


def test_a_burst_joining_thirty_running_streams_never_starves_them(engine):
    timeline = Timeline(engine)
    running = [timeline.start(seed) for seed in range(30)]
    while not all(timeline.got[s] for s in running):
        timeline.step()
    for _ in range(3):  # the listeners now hold 0.4 s: twelve prefills at once (0.6 s) would outrun it
        timeline.step()
    first_prefill = len(engine.prefilled)
    burst = [timeline.start(100 + i, patches=4) for i in range(12)]
    while not all(timeline.got[s] for s in burst):
        timeline.step()
    patch_s = engine.scheduler.patch_s
    for i, stream in enumerate(running):
        assert_never_dry(timeline.got[stream], patch_s, f"running stream {i}")
    prefills = engine.prefilled[first_prefill:]
    assert sorted(row for rows in prefills for row in rows) == sorted(s.row for s in burst)
    assert len(prefills) > 1 and max(map(len, prefills)) < 12, f"the burst was prefilled as {prefills}"
    # Each newcomer's first patch is launched in the step that prefilled it, collected in the next.
    prefill_step = {row: timeline.steps - len(prefills) + k for k, rows in enumerate(prefills) for row in rows}
    first_steps = {s.row: timeline.got[s][0][0] for s in burst}
    late = {row: (prefill_step[row], first_steps[row]) for row in first_steps if first_steps[row] > prefill_step[row] + 1}
    assert not late, f"first chunks later than one step after their prefill (prefill step, chunk step): {late}"


def test_a_lone_joiner_gets_its_first_chunk_within_two_steps(engine):
    timeline = Timeline(engine)
    running = [timeline.start(seed) for seed in range(30)]
    for _ in range(5):
        timeline.step()
    for seed in range(3):
        joiner, asked_at = timeline.start(200 + seed, patches=3), timeline.steps
        while not timeline.got[joiner]:
            timeline.step()
        assert timeline.got[joiner][0][0] - asked_at <= 2
    patch_s = engine.scheduler.patch_s
    for i, stream in enumerate(running):
        assert_never_dry(timeline.got[stream], patch_s, f"running stream {i}")


def test_a_burst_on_an_idle_engine_is_prefilled_in_groups_as_it_starts(engine):
    """Admission ahead: nothing plays, so each group of `admit_ahead` newcomers is prefilled as
    soon as it is started; the rest join at the first step, which launches everyone's first patch.
    The audio is what the same requests make when every prefill waits for the step."""
    import numpy as np

    engine.scheduler.admit_ahead = 4
    requests = [SynthesisRequest(TEXT, seed=300 + i, min_len=3, max_len=3) for i in range(11)]
    streams, got = [engine.start(r) for r in requests], {}
    assert engine.prefilled == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert [s.row for s in engine.scheduler.joining] == [8, 9, 10]
    step_into(engine, got)
    assert engine.prefilled[2:] == [[8, 9, 10]] and not engine.scheduler.joining
    step_into(engine, got)
    assert all(len(got.get(s, [])) == 1 for s in streams), "every first chunk comes with the second step"
    while not all(s.done for s in streams):
        step_into(engine, got)
    ahead = [np.concatenate([c.audio for c in got[s]]) for s in streams]

    engine.scheduler.admit_ahead = 0
    engine.prefilled.clear()
    streams, got = [engine.start(r) for r in requests], {}
    assert engine.prefilled == []
    while not all(s.done for s in streams):
        step_into(engine, got)
    assert engine.prefilled == [list(range(11))]
    for mine, want in zip(ahead, [np.concatenate([c.audio for c in got[s]]) for s in streams]):
        np.testing.assert_allclose(mine, want, atol=1e-5)


def test_no_admission_ahead_while_listeners_play(engine):
    engine.scheduler.admit_ahead = 2
    timeline = Timeline(engine)
    running = [timeline.start(seed) for seed in range(2)]  # prefilled ahead: the engine was idle
    assert engine.prefilled == [[0, 1]]
    while not all(timeline.got[s] for s in running):
        timeline.step()
    for seed in range(2, 6):
        timeline.start(seed)
    assert engine.prefilled == [[0, 1]], "a prefill now would delay the playing streams"


def test_streams_that_run_dry_at_their_seams_are_all_admitted_at_the_next_step(engine):
    """A stall (a long collection, a burst on the host) runs every listener dry. Streams then
    reaching a seam (their next sentence's prefill) join already playing and dry: each is admitted
    at the next step, however little slack the running streams have, not one a step while the
    rest wait, silent."""
    engine.preparer.segment_weight = 40  # a segment per sentence
    text = "One sentence comes first. Another one follows it. Then a third one ends it."
    streams = [engine.start(SynthesisRequest(text, seed=i, min_len=3 + i % 3, max_len=3 + i % 3)) for i in range(12)]
    scheduler, held_back = engine.scheduler, []
    while not all(s.listener.playing for s in streams):
        engine.step()
    engine.clock.now += 2.0
    while not all(s.done for s in streams):
        now = engine.clock()
        dry = [s for s in scheduler.joining if s.listener.playing and s.listener.slack(now) <= 0]
        engine.step()
        held_back += [s.row for s in dry if s in scheduler.joining]
    assert not held_back, f"rows left joining, their listeners dry, after a step: {held_back}"


def test_a_stream_at_its_seam_with_under_three_steps_of_slack_is_admitted_before_it_runs_dry(engine):
    """A joining stream's first chunk comes at the end of the step after the one that prefills it;
    held back one more step, a stream with less than three steps of audio left runs dry whatever
    else happens, so it is admitted now, even while a running listener is about to run dry. (Held
    back until one step was left, seams came a step late under 128 live sessions: benchmarks.md.)"""
    engine.clock.join_s = 0.005  # a prefill costs little next to a step, as a batched one does on a GPU
    timeline = Timeline(engine)
    running = [timeline.start(seed) for seed in range(4)]
    while not all(timeline.got[s] for s in running):
        timeline.step()
    engine.clock.now += engine.scheduler.least_slack() - 0.04  # a stall: the running listeners hold 40 ms
    started = engine.clock()
    seam = [timeline.start(400 + i, patches=3) for i in range(6)]
    for stream in seam:  # each still plays its sentence before: 2.75 steps of it left
        stream.listener.release(0.22, started)
    while not all(timeline.got[s] for s in seam):
        timeline.step()
    late = {s.row: round(timeline.got[s][0][1] - (started + 0.22), 3) for s in seam
            if timeline.got[s][0][1] > started + 0.22}
    assert not late, f"seconds each stream's listener waited in silence for its next sentence, by row: {late}"


def test_a_seam_is_released_the_audios_way_to_its_listener_before_they_run_dry(engine):
    """A released patch reaches its listener a little later (the event loop's send, the socket),
    and their player's clock runs from when their first patch came. Streams at a seam with 3.4
    steps of audio left are admitted together, so that each next sentence's first chunk is
    released WAY_TO_LISTENER_S before the listener would run dry, not one stream a step, just in
    time on the engine's clock (as 128 live sessions heard their seams: benchmarks.md)."""
    engine.clock.join_s = 0.005
    timeline = Timeline(engine)
    running = [timeline.start(seed) for seed in range(4)]
    while not all(timeline.got[s] for s in running):
        timeline.step()
    engine.clock.now += engine.scheduler.least_slack() + WAY_TO_LISTENER_S - 0.04  # the running hold 40 ms
    started, left = engine.clock(), 0.27
    seam = [timeline.start(500 + i, patches=3) for i in range(6)]
    for stream in seam:
        stream.listener.release(left, started)
    while not all(timeline.got[s] for s in seam):
        timeline.step()
    short = {s.row: round(started + left - timeline.got[s][0][1], 3) for s in seam
             if timeline.got[s][0][1] > started + left - WAY_TO_LISTENER_S}
    assert not short, f"seconds each listener held when their next sentence's first chunk went out, by row: {short}"
