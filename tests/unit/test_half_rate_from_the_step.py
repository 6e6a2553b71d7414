"""The step makes each patch at half the model's rate too (decode_step.halve, for every row at
once), with soxr's own filter (listener.halving_taps), and a listener at that rate (OpenAI's pcm,
the live socket) is sent them put together (listener.Halved), with no resampling or conversion on
the event loop. What they hear is what soxr's streaming resampler makes of the model-rate audio,
to float rounding: pauses, held and retried segments, the stream's start and end included."""
from __future__ import annotations

import tempfile

import numpy as np
import pytest
import soxr
import torch

from inference import Engine, SynthesisRequest
from inference.model.tiny_checkpoint import write_tiny_checkpoint
from inference.request.listener import HALF_REACH, Output, halving_taps
from inference.request.request import AudioChunk, Half
from inference.runtime.decode_step import halve, int16_samples
from ui.services.audio import to_pcm

from ..support.app_helpers import on_fake_device_time, tiny_checkpoint

RATE = 48000


def heard(chunks: list[AudioChunk], halves: bool) -> list[tuple[np.ndarray, bytes | None]]:
    """What a listener at half the rate is sent, piece by piece: audio, and int16 bytes when made."""
    output = Output(1.0, RATE, RATE // 2, halves)
    return [output.hear(c) for c in chunks] + [output.end()]


def assert_soxrs(chunks: list[AudioChunk]) -> list[bytes | None]:
    """Our pieces against soxr's streaming resampler fed the same chunks; returns our bytes as made."""
    ours, theirs = heard(chunks, halves=True), heard(chunks, halves=False)
    a, b = np.concatenate([x for x, _ in ours]), np.concatenate([x for x, _ in theirs])
    assert len(a) == len(b) == round(sum(len(c.audio) for c in chunks) / 2)
    assert np.max(np.abs(a - b)) < 2e-6, "soxr's samples, to float rounding"
    assert all(p is None or p == to_pcm(x) for x, p in ours), "the bytes are the samples' as every door rounds"
    sent = np.frombuffer(b"".join(p if p is not None else to_pcm(x) for x, p in ours), "<i2").astype(np.int32)
    assert np.max(np.abs(sent - np.frombuffer(to_pcm(b), "<i2"))) <= 1, "an int16 step at most, at a tie"
    return [p for _, p in ours]


def stepped(patches: list[np.ndarray | int]) -> list[AudioChunk]:
    """Chunks as the engine makes them of `patches` (audio, or the samples of a pause), the half-rate
    patch of each made as the step makes it: from the row's last samples, from silence after a pause."""
    taps = torch.tensor(halving_taps(RATE)[::-1].copy(), dtype=torch.float32).view(1, 1, -1)
    history, chunks = torch.zeros(1, 2 * HALF_REACH), []
    for k, p in enumerate(patches):
        if isinstance(p, int):
            chunks.append(AudioChunk(np.zeros(p, np.float32), None, k, pause=True))
            history = torch.zeros(1, 2 * HALF_REACH)
            continue
        audio = torch.from_numpy(p)[None]
        half = halve(history, audio, taps)
        history = torch.cat([history, audio], 1)[:, -2 * HALF_REACH:]
        chunks.append(AudioChunk(p, None, k, half=Half(half[0].numpy(), int16_samples(half[0]).numpy().tobytes())))
    return chunks


def test_soxrs_filter_read_off_two_impulses_gives_its_samples_for_a_whole_stream():
    rng = np.random.default_rng(3)
    audio = (0.3 * rng.standard_normal(7680 * 4)).astype(np.float32)
    stream = soxr.ResampleStream(RATE, RATE // 2, 1, dtype="float32", quality="HQ")
    theirs = np.concatenate([stream.resample_chunk(audio[k:k + 7680]) for k in range(0, len(audio), 7680)]
                            + [stream.resample_chunk(audio[:0], last=True)])
    taps = torch.tensor(halving_taps(RATE)[::-1].copy(), dtype=torch.float32).view(1, 1, -1)
    ours = halve(torch.zeros(1, 2 * HALF_REACH), torch.from_numpy(audio)[None], taps)[0].numpy()
    ours = ours[HALF_REACH // 2: HALF_REACH // 2 + len(audio) // 2]  # from the stream's first sample to its last
    assert len(theirs) == len(ours) and np.max(np.abs(ours - theirs)) < 2e-6


@pytest.mark.parametrize("lead", [0, 2400], ids=["speech first", "a pause first"])
def test_patches_and_pauses_put_together_are_soxrs_resample_of_what_is_heard(lead):
    rng = np.random.default_rng(4)
    speech = [(0.4 * rng.standard_normal(7680)).astype(np.float32) for _ in range(5)]
    patches = ([lead] if lead else []) + speech[:2] + [4800, 7680] + speech[2:4] + [2400] + speech[4:]
    made = assert_soxrs(stepped(patches))
    assert sum(p is not None for p in made) == len(made), "every piece went out as the step's bytes"


def test_a_patch_at_half_the_rate_holds_back_4_ms_where_soxr_holds_back_up_to_36():
    """docs/api.md: what the first patch of speech leaves for the next one to complete."""
    rng = np.random.default_rng(5)
    chunks = stepped([(0.4 * rng.standard_normal(7680)).astype(np.float32) for _ in range(2)])
    ours, theirs = heard(chunks, halves=True)[0][0], heard(chunks, halves=False)[0][0]
    held_ours, held_soxr = (3840 - len(ours)) / 24, (3840 - len(theirs)) / 24  # ms at 24 kHz
    assert held_ours < 4.2 < held_soxr <= 36, (held_ours, held_soxr)


def test_a_chunk_cut_at_the_bound_ends_where_it_was_cut():
    rng = np.random.default_rng(6)
    chunks = stepped([(0.4 * rng.standard_normal(7680)).astype(np.float32) for _ in range(3)])
    chunks[-1] = chunks[-1].head(3000)
    ours = np.concatenate([x for x, _ in heard(chunks, halves=True)])
    assert len(ours) == (2 * 7680 + 3000) // 2
    theirs = np.concatenate([x for x, _ in heard(chunks, halves=False)])
    # Up to the cut's own ring the same; there, the step's patch was resampled whole.
    assert np.max(np.abs(ours[: len(ours) - HALF_REACH] - theirs[: len(ours) - HALF_REACH])) < 2e-6


def test_the_engines_stream_with_pauses_and_held_segments_is_soxrs_at_half_the_rate():
    engine = Engine.from_pretrained(tiny_checkpoint(), device="cpu", dtype="float32", warmup=False, max_streams=2)
    engine.preparer.segment_weight = 4  # a segment per sentence: later segments are held, then released
    text = "[pause 100ms] Hi there. [pause 200ms] So it is. We are here."
    chunks = list(engine.stream(SynthesisRequest(text=text, seed=7, min_len=3, max_len=5)))
    assert sum(c.pause for c in chunks) >= 2 and len({c.segment for c in chunks}) >= 3
    assert all(c.half is not None for c in chunks if not c.pause)
    made = assert_soxrs(chunks)
    assert all(p is not None for p in made), "no piece needed converting on the loop"


@pytest.mark.parametrize("text", ["Hi. Yo.", "Hi. [pause 100ms] Yo."], ids=["carried on", "after a pause"])
def test_retried_segments_start_from_where_their_first_attempt_did(text, monkeypatch):
    """A runaway's retry rewinds the row (DecoderStart.REWIND): its half-rate patches must start
    from the same samples as the first attempt's, the last segment's or a pause's silence."""
    checkpoint = write_tiny_checkpoint(tempfile.mkdtemp(prefix="voxcpm2-never-stops-"), fast_vae=True, never_stops=True)
    engine = Engine.from_pretrained(checkpoint, device="cpu", dtype="float32", warmup=False, max_streams=2)
    engine.preparer.segment_weight = 4
    on_fake_device_time(engine, monkeypatch, 0.001)  # far faster than real time: runaways are held and retried
    stream = engine.start(SynthesisRequest(text=text, seed=40))
    chunks = []
    while not stream.done:
        chunks += [c for s, made in engine.step() if s is stream for c in made]
    assert stream.error is None and stream.plan.report.retries, "a segment was retried"
    assert_soxrs(chunks)


def test_rows_that_join_a_running_batch_start_their_own_half_rate_patches_from_silence():
    from .test_batching import staggered

    engine = Engine.from_pretrained(tiny_checkpoint(), device="cpu", dtype="float32", warmup=False, max_streams=4)
    engine.preparer.segment_weight = 4
    requests = [SynthesisRequest(text=t, seed=s, min_len=3, max_len=5) for s, t in
                enumerate(["Hi there. So it is.", "[pause 50ms] We are here.", "Go on. [pause 60ms] Yes."])]
    for chunks in staggered(engine, requests, joins_at=[0, 2, 3]):
        assert_soxrs(chunks)
