"""Continuous batching on the tiny checkpoint (CPU, float32): a request gives the same latents and
audio, and stops at the same patch, whether it runs alone or in a batch that others join and
leave at different steps; cancelled streams free their row; a full engine refuses a new stream."""
from __future__ import annotations

import numpy as np
import pytest

from inference import Engine, SynthesisRequest
from inference.runtime.engine import EngineFull
from tests.support.app_helpers import step_into
from tests.unit.test_golden_parity import CASES, CKPT, _request, load_case

TOLERANCE = 1e-5  # relative; the CPU's matrix kernels round differently at other batch sizes
TEXT = "Hello world, this is a test of several voices at once."


@pytest.fixture(scope="module")
def engine():
    # Four rows for nine golden requests: rows are left and taken again while others run on.
    return Engine.from_pretrained(str(CKPT), device="cpu", dtype="float32", warmup=False, max_streams=4)


def alone(engine, req) -> list:
    return list(engine.stream(req))


def staggered(engine, requests, joins_at) -> list[list]:
    """Starts request i at step joins_at[i] (or later, once a row is free) and runs to the end."""
    pending, streams, step, got = list(range(len(requests))), {}, 0, {}
    while pending or engine.scheduler.active:
        while pending and joins_at[pending[0]] <= step and engine.free_rows:
            i = pending.pop(0)
            streams[i] = engine.start(requests[i])
        step_into(engine, got)
        step += 1
    return [got.get(streams[i], []) for i in range(len(requests))]


def relative(a, b) -> float:
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-12))


def assert_same(got, want, label):
    assert [c.index for c in got] == [c.index for c in want], f"{label}: stopped at another patch"
    lat = relative(np.stack([c.latents for c in got]), np.stack([c.latents for c in want]))
    audio = relative(np.concatenate([c.audio for c in got]), np.concatenate([c.audio for c in want]))
    assert lat < TOLERANCE and audio < TOLERANCE, f"{label}: latents {lat:.1e}, audio {audio:.1e}"
    return lat, audio


def test_every_golden_mode_equals_itself_alone_when_batched(engine):
    """Design, cloning, continuation (with and without a reference), a stop-head stop and a length
    cap, each with its own noise, cfg and lengths, joining at different steps into four rows."""
    requests = [_request(load_case(path)) for path in CASES]
    want = [alone(engine, req) for req in requests]
    got = staggered(engine, requests, joins_at=[0, 0, 1, 3, 3, 4, 6, 7, 9])
    worst = max(max(assert_same(g, w, path.stem)) for g, w, path in zip(got, want, CASES))
    print(f"batched vs alone over {len(CASES)} golden requests: worst relative error {worst:.1e}")


def test_a_segment_ended_at_its_cap_below_a_running_row_carries_its_own_decoder_state(engine):
    """A segment cut at its cap takes no next patch, but its row runs the batch's next one as
    harmless garbage while a higher row streams: the state kept for its next segment is the one
    before that patch (runner.ran_since), or every later segment is garbled (it was, at the first
    seam, until the half-rate patches' test found it)."""
    weight, engine.preparer.segment_weight = engine.preparer.segment_weight, 4  # a segment per sentence
    try:
        texts = ["Hi there. So it is.", "We are here. Yes.", "Go on. Yes."]
        requests = [SynthesisRequest(text=t, seed=s, min_len=3, max_len=5) for s, t in enumerate(texts)]
        want = [alone(engine, r) for r in requests]
        got = staggered(engine, requests, joins_at=[0, 2, 3])
    finally:
        engine.preparer.segment_weight = weight
    assert len({c.segment for c in want[0]}) >= 3, "segments ended at their cap, below a running row"
    for k, (g, w) in enumerate(zip(got, want)):
        assert_same(g, w, f"request {k}")


def test_per_row_seed_cfg_timesteps_and_lengths(engine):
    """Rows with different Euler step counts share each patch: rows that need fewer steps keep
    their patch unchanged for the rest (dt = 0), which must not move them at all."""
    requests = [SynthesisRequest(TEXT, seed=1, cfg_value=2.0, inference_timesteps=10, min_len=7, max_len=7),
                SynthesisRequest(TEXT, seed=2, cfg_value=1.0, inference_timesteps=4, min_len=3, max_len=5),
                SynthesisRequest(TEXT, seed=3, cfg_value=3.5, inference_timesteps=25, min_len=9, max_len=9),
                SynthesisRequest("Short.", seed=4, cfg_value=2.5, inference_timesteps=1, min_len=2, max_len=4),
                SynthesisRequest(TEXT, seed=5, control="a slow deep voice", min_len=6, max_len=6)]
    want = [alone(engine, req) for req in requests]
    got = staggered(engine, requests, joins_at=[0, 2, 2, 3, 5])
    for i, (g, w) in enumerate(zip(got, want)):
        assert_same(g, w, f"request {i}")


def test_a_cancelled_stream_frees_its_row_and_leaves_the_others_exact(engine):
    long = SynthesisRequest(TEXT, seed=11, min_len=40, max_len=40)
    other = SynthesisRequest(TEXT, seed=12, min_len=8, max_len=8)
    late = SynthesisRequest(TEXT, seed=13, min_len=5, max_len=5)
    want_other, want_late = alone(engine, other), alone(engine, late)
    first, second, got = engine.start(long), engine.start(other), {}
    for _ in range(4):
        step_into(engine, got)
    made = len(got.get(first, []))
    first.cancel()
    step_into(engine, got)
    assert first.done and first.row in engine.scheduler.free or engine.scheduler.active == 1
    third = engine.start(late)
    assert third.row == first.row  # the freed row is the lowest free one
    while engine.scheduler.active:
        step_into(engine, got)
    assert len(got.get(first, [])) <= made + 1  # at most the patch under way when it was cancelled
    assert_same(got[second], want_other, "the stream beside the cancelled one")
    assert_same(got[third], want_late, "the stream in the cancelled one's row")


def test_a_full_engine_refuses_a_stream_until_a_row_is_free():
    engine = Engine.from_pretrained(str(CKPT), device="cpu", dtype="float32", warmup=False, max_streams=2)
    req = lambda seed: SynthesisRequest(TEXT, seed=seed, min_len=3, max_len=3)  # noqa: E731
    streams, got = [engine.start(req(1)), engine.start(req(2))], {}
    with pytest.raises(EngineFull, match="all 2 streams are in use"):
        engine.start(req(3))
    while engine.scheduler.active:
        step_into(engine, got)
    assert all(len(got[s]) == 3 and s.error is None for s in streams)
    assert_same(alone(engine, req(3)), alone(engine, req(3)), "after the batch emptied")


def test_a_closed_generator_gives_its_row_back(engine):
    rows = engine.free_rows
    gen = engine.stream(SynthesisRequest(TEXT, seed=21, min_len=30, max_len=30))
    next(gen)
    assert engine.free_rows == rows - 1
    gen.close()
    assert engine.free_rows == rows and engine.scheduler.active == 0


def test_a_stream_that_cannot_be_admitted_fails_alone(engine, monkeypatch):
    """Admission of several prompts fails as one (an out-of-memory prefill, say): they are retried
    one at a time, so only the one that cannot fit fails and the others run exactly."""
    ok = SynthesisRequest(TEXT, seed=31, min_len=4, max_len=4)
    want = alone(engine, ok)
    real, doomed = engine.runner.admit, []

    def admit(joins):
        if any(j.row in doomed for j in joins):
            raise MemoryError("this prompt does not fit")
        real(joins)

    monkeypatch.setattr(engine.runner, "admit", admit)
    good, bad = engine.start(ok), engine.start(SynthesisRequest(TEXT, seed=32, min_len=4, max_len=4))
    doomed.append(bad.row)
    got = {}
    while engine.scheduler.active:
        step_into(engine, got)
    assert isinstance(bad.error, MemoryError) and bad.done and not got.get(bad)
    assert bad in got, "the step it failed in returned its end"
    assert good.error is None
    assert_same(got[good], want, "the stream admitted beside the failing one")
    assert engine.free_rows == engine.rows


def test_warm_up_decodes_every_context_length_into_the_scratch_row_and_resets_it(engine, monkeypatch):
    """BatchRunner.capture runs each length a joining stream's decoder context can have once, so
    no shape is first seen (and, on CUDA, tuned) at a request's start; no stream's row is touched."""
    step, scratch = engine.runner.step, engine.runner.scratch_row
    before = step.decoder.flat.clone()
    seen, decode = [], step.vae.decode_chunk

    def counting(frames, state):
        out = decode(frames, state)
        seen.append((frames.shape[-1], bool(state.flat.any())))
        return out

    monkeypatch.setattr(step.vae, "decode_chunk", counting)
    step.warm_context_decodes(scratch, 3)
    frames = step.patch_shape[0]
    assert seen == [(frames, True), (2 * frames, True), (3 * frames, True)]  # the row held each context
    assert not step.decoder.flat[scratch].any()
    others = [r for r in range(step.decoder.flat.shape[0]) if r != scratch]
    assert step.decoder.flat[others].equal(before[others])


@pytest.mark.parametrize("rows, top", [(128, [80, 96, 112, 128]), (100, [80, 96, 100])])
def test_a_patch_runs_in_the_smallest_bucket_of_16_rows_that_holds_its_streams(rows, top):
    """A patch costs what its bucket holds, and from 64 rows on that grows about linearly (H200:
    19.4 ms at 64, 22.4 at 80, 25.3 at 96, 31.5 at 128), so the buckets go by 16 rows, as
    nano-vllm's do: by powers of two, 65 streams ran at 128's pace. Prompts prefilled at once keep
    powers of two (a burst pads to the next), which keeps the graphs captured at start-up fewer."""
    r = Engine.from_pretrained(str(CKPT), device="cpu", dtype="float32", warmup=False, max_streams=rows).runner
    assert r.buckets == [1, 2, 4, 8, 16, 32, 48, 64] + top
    assert [r.bucket(n) for n in (3, 9, 33, 65, 81, 97)] == [4, 16, 48, 80, 96, top[2]]
    assert sorted({k for k, _ in r.prefill_keys}) == [1, 2, 4, 8, 16, 32, 64, rows]
