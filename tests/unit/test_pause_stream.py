"""Pauses in the stream, on the golden tiny model in every mode: exact zeros of the asked length
between the segments' audio, the speech around them equal to the same segments without the
pause, and the offline decode of the latents with the same zeros inserted equal to the stream."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from inference import Engine, SynthesisRequest
from inference.runtime.offline import OfflineDecode
from tests.support.app_helpers import decode_whole, run_to_end
from tests.unit.test_golden_parity import CKPT, GOLDEN

CLIP = str(GOLDEN / "clip_16k_mono.wav")
MODES = {
    "design": dict(control="A calm voice"),
    "cloning": dict(reference_audio=CLIP),
    "ultimate": dict(reference_audio=CLIP, prompt_audio=CLIP, prompt_text="It starts like this."),
}
RATE, PATCH = 48000, 7680


@pytest.fixture(scope="module")
def engine():
    engine = Engine.from_pretrained(str(CKPT), device="cpu", dtype="float32", warmup=False, max_streams=2)
    engine.preparer.segment_weight = 15  # "Hello there." and " How are you?" are a segment each, pause or not
    assert (engine.sample_rate, engine.cfg.patch_samples) == (RATE, PATCH)
    return engine


def run(engine: Engine, text: str, **kw):
    """(released chunks, the stream) of one request, stepped to its end."""
    return run_to_end(engine, SynthesisRequest(text=text, seed=21, **kw))


def audio_of(chunks) -> np.ndarray:
    return np.concatenate([c.audio for c in chunks])


def pause_runs(chunks) -> list[tuple[int, int]]:
    """(first sample, samples) of each run of pause chunks in the stream."""
    runs, at = [], 0
    for before, chunk in zip([None] + chunks, chunks):
        if chunk.pause and before is not None and before.pause:
            runs[-1] = (runs[-1][0], runs[-1][1] + len(chunk.audio))
        elif chunk.pause:
            runs.append((at, len(chunk.audio)))
        at += len(chunk.audio)
    return runs


@pytest.mark.parametrize("mode", list(MODES))
def test_a_pause_is_exact_silence_between_the_same_segments(engine, mode):
    plain, _ = run(engine, "Hello there. How are you?", **MODES[mode])
    paused, stream = run(engine, "Hello there. [pause 500ms] How are you?", **MODES[mode])
    assert len(stream.plan.spoken) == 2 and stream.plan.report.retries == []
    end = sum(len(c.audio) for c in plain if c.segment == 0)  # where the first segment's audio ends
    assert pause_runs(paused) == [(end, RATE // 2)]
    silence = [c for c in paused if c.pause]
    assert all(c.latents is None and c.segment == 0 and len(c.audio) <= PATCH for c in silence)
    assert [c.index for c in paused] == list(range(len(paused)))
    got, want = audio_of(paused), audio_of(plain)
    assert np.all(got[end:end + RATE // 2] == 0)
    # The decoder carried on across the silence: the second segment is as it was without it.
    spliced = np.concatenate([want[:end], np.zeros(RATE // 2, np.float32), want[end:]])
    assert got.shape == spliced.shape and np.max(np.abs(got - spliced)) < 1e-6


def test_leading_consecutive_and_trailing_pauses(engine):
    plain, _ = run(engine, "Hello there. How are you?")
    text = "[pause 100ms] Hello there. [pause 1s]<break time='250ms'/> How are you? [pause 2.5s]"
    paused, stream = run(engine, text)
    end = sum(len(c.audio) for c in plain if c.segment == 0)
    speech = len(audio_of(plain))
    lead = RATE // 10
    assert pause_runs(paused) == [(0, lead), (lead + end, RATE * 5 // 4), (lead + speech + RATE * 5 // 4, RATE * 5 // 2)]
    assert paused[0].pause and paused[-1].pause and paused[-1].segment == 1
    got = audio_of(paused)
    assert np.max(np.abs(np.concatenate([c.audio for c in paused if not c.pause]) - audio_of(plain))) < 1e-6
    # The listener's clock counts the silence as audio: the deadlines see it play.
    assert stream.listener.released_s * RATE == pytest.approx(len(got))
    assert stream.plan.snapshot().spoken_text() == \
        "[pause 100ms] Hello there. [pause 1s]<break time='250ms'/> How are you? [pause 2.5s]"


def test_the_offline_decode_inserts_the_same_silence(engine):
    chunks, stream = run(engine, "[pause 60ms] Hello there. [pause 750ms] How are you? [pause 90ms]", **MODES["ultimate"])
    latents = np.stack([c.latents for c in chunks if not c.pause])
    pauses, speech = [], 0
    for chunk in chunks:
        if chunk.pause and pauses and pauses[-1][0] == speech:
            pauses[-1][1] += len(chunk.audio)
        elif chunk.pause:
            pauses.append([speech, len(chunk.audio)])
        speech += not chunk.pause
    assert [n for _, n in pauses] == [RATE * 60 // 1000, RATE * 3 // 4, RATE * 90 // 1000]
    pauses = tuple(map(tuple, pauses))
    stream_audio = audio_of(chunks)
    whole = decode_whole(engine, latents, stream.decode_context, pauses)
    assert whole.shape == stream_audio.shape and np.max(np.abs(whole - stream_audio)) < 1e-5
    # A piece at a time, with a pause on a piece's edge, gives the same samples.
    decode = OfflineDecode(latents, stream.decode_context, 2, pauses)
    pieces = []
    while not decode.done:
        pieces.append(decode.decode_next(engine.vae, torch.float32, engine.device))
    assert decode.samples == len(stream_audio) and np.max(np.abs(np.concatenate(pieces) - whole)) < 1e-5


@pytest.mark.parametrize("pauses", [((0, 5), (3, 7680), (8, 3)), ((3, 1), (3, 2), (5, 100))])
def test_pieces_put_each_pause_between_the_right_patches(engine, pauses):
    """Pieces of 1 and 3 patches after 3 of context: pauses first, last, on a piece's edge, inside one."""
    latents = (np.random.default_rng(5).standard_normal((8, 64, 4)) * 0.5).astype(np.float32)
    context = torch.from_numpy(latents[:3]).transpose(1, 2).contiguous()
    plain = decode_whole(engine, latents, context)
    want, at = [], 0
    for i, n in pauses:
        want += [plain[at:i * PATCH], np.zeros(n, np.float32)]
        at = i * PATCH
    want = np.concatenate(want + [plain[at:]])
    for piece in (1, 3):
        decode, got = OfflineDecode(latents, context, piece, pauses), []
        while not decode.done:
            got.append(decode.decode_next(engine.vae, torch.float32, engine.device))
        got = np.concatenate(got)
        assert got.shape == want.shape and np.max(np.abs(got - want)) < 1e-5, f"pieces of {piece}"
