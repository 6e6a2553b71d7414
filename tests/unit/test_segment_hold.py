"""A later segment's audio is held for the runaway check only while the listener's buffer allows
(inference/request/continuation.py, inference/runtime/scheduler.py). On a tiny model that never
stops, with a fake clock and a fake step time: slower than real time, nothing is held past the
listener's slack and no attempt is retried; far faster, runaways are held and retried as before."""
from __future__ import annotations

import tempfile

import pytest

from inference import Engine, SynthesisRequest
from inference.model.tiny_checkpoint import write_tiny_checkpoint

from ..support.app_helpers import FakeDeviceTime, on_fake_device_time

TEXT = "Hi. Yo. Go on. So it is. We are here."  # a segment per sentence at segment weight 4


@pytest.fixture(scope="module")
def checkpoint() -> str:
    return write_tiny_checkpoint(tempfile.mkdtemp(prefix="voxcpm2-never-stops-"), fast_vae=True, never_stops=True)


def engine_at(checkpoint: str, step_s: float, monkeypatch) -> tuple[Engine, FakeDeviceTime]:
    """An engine whose every step takes `step_s` on a fake clock (a patch is 0.16 s of audio)."""
    engine = Engine.from_pretrained(checkpoint, device="cpu", dtype="float32", warmup=False, max_streams=2)
    engine.preparer.segment_weight = 4
    return engine, on_fake_device_time(engine, monkeypatch, step_s)


def follow(engine: Engine, clock: FakeDeviceTime, text: str = TEXT):
    """Runs one request to its end: the stream, and (collected at, released at) for each chunk
    released, in order."""
    stream = engine.start(SynthesisRequest(text=text, seed=40))
    plan, collected, times = stream.plan, {}, []
    add = plan.add

    def timed_add(audio, latents, ended, pcm=None, half=None):
        collected[id(latents)] = clock()  # the chunk made of it carries the same latents
        return add(audio, latents, ended, pcm, half)
    plan.add = timed_add
    while not stream.done:
        for s, chunks in engine.step():
            if s is stream:
                times += [(collected[id(c.latents)], clock()) for c in chunks]
    assert stream.error is None, stream.error
    return stream, times


def held_past_slack(times: list[tuple[float, float]], patch_s: float) -> list[tuple[int, float, float]]:
    """(chunk, held, slack) of each chunk held longer than its listener's buffer lasted when it
    was collected. The listener plays in real time from its first chunk and, when its buffer ran
    dry, resumes when the next chunk comes (as the page's player does)."""
    releases = [released for _, released in times]
    late = []
    for i, (collected, released) in enumerate(times):
        dry_at = None  # when the listener's buffer runs dry, from the chunks released before `collected`
        for j, at in enumerate(releases):
            if at > collected or j >= i:
                break
            dry_at = max(at, at if dry_at is None else dry_at) + patch_s
        slack = 0.0 if dry_at is None else max(0.0, dry_at - collected)
        if released - collected > slack + 1e-9:
            late.append((i, released - collected, slack))
    return late


def dry_spells(times: list[tuple[float, float]], patch_s: float) -> list[tuple[int, float]]:
    """(chunk, silence s) wherever the listener's buffer ran dry before that chunk came."""
    dry_at, spells = None, []
    for i, (_, released) in enumerate(times):
        if dry_at is not None and released > dry_at + 1e-9:
            spells.append((i, released - dry_at))
        dry_at = max(released, released if dry_at is None else dry_at) + patch_s
    return spells


@pytest.mark.parametrize("step_s", [0.2, 0.12])  # slower than real time, and a little faster
def test_generation_near_real_time_never_holds_audio_past_the_listeners_slack(checkpoint, step_s, monkeypatch):
    engine, clock = engine_at(checkpoint, step_s, monkeypatch)
    stream, times = follow(engine, clock)
    plan = stream.plan
    assert plan.segment == len(plan.spoken) >= 4 and len(times) == plan.released
    late = held_past_slack(times, engine.scheduler.patch_s)
    assert not late, f"chunks held longer than the listener's buffer lasted (chunk, held s, slack s): {late[:5]}"
    # Released before their end, attempts cannot be retried: they run to the cap.
    assert plan.report.released_early, "no segment was released early: the test shows nothing"
    assert set(plan.report.released_early) <= set(plan.report.cut)
    if step_s < engine.scheduler.patch_s:  # faster than real time: no gap at any segment boundary
        assert dry_spells(times, engine.scheduler.patch_s) == []
    else:  # slower than real time: nothing is ever held
        assert plan.report.retries == [] and plan.report.released_early == list(range(1, len(plan.spoken)))
        assert all(released == collected for collected, released in times)


def test_fast_generation_still_holds_and_retries_runaways(checkpoint, monkeypatch):
    engine, clock = engine_at(checkpoint, 0.001, monkeypatch)
    stream, times = follow(engine, clock, text="Hi. Yo.")
    report = stream.plan.report
    assert [r["seed"] for r in report.retries] == [41, 42] and report.released_early == []
    assert report.seeds == [40, 43] and report.cut == [0, 1]
    # Nothing of the two rejected attempts went out: the first segment and the last attempt only.
    caps = [6 * len(engine.tokenizer.encode(t)) + 10 for t in ("Hi.", " Yo.")]
    assert len(times) == sum(caps)
