"""Long texts on the tiny model: segments continue one stream (parity with the official
`generate_with_prompt_cache`, one continuous decode, no jump at a boundary), a runaway is
retried then cut with nothing held back lost, and 20,000 characters stream with flat memory."""
from __future__ import annotations

import logging
import tempfile
import time

import numpy as np
import pytest
import torch

from inference import Engine, SynthesisRequest
from inference.request.request import seed_noise
from inference.model.tiny_checkpoint import write_tiny_checkpoint
from inference.serving.worker import EngineWorker
from tests.support.app_helpers import _rss_mb as rss_mb, record_figure, run_to_end
from bench.official import fed_noise, load_official_model
from tests.unit.test_golden_parity import CKPT, GOLDEN

TEXT = ("The quick brown fox jumps over the dog. It was a sunny day in May. "
        "Then the rain came down hard. Everyone ran for cover.")
CLIP = str(GOLDEN / "clip_16k_mono.wav")
MODES = {
    "design": dict(),
    "cloning": dict(reference_audio=CLIP),
    "ultimate": dict(reference_audio=CLIP, prompt_audio=CLIP, prompt_text="It starts like this."),
}


run = run_to_end


@pytest.fixture(scope="module")
def golden_engine():
    engine = Engine.from_pretrained(str(CKPT), device="cpu", dtype="float32", warmup=False, max_streams=2)
    engine.preparer.segment_weight = 40  # a segment per sentence of TEXT
    return engine


@pytest.fixture(scope="module")
def official():
    return load_official_model(CKPT)


def _official_cache(model, mode: str):
    if mode == "design":
        return None
    if mode == "cloning":
        return model.build_prompt_cache(reference_wav_path=CLIP)
    return model.build_prompt_cache(prompt_text=MODES[mode]["prompt_text"], prompt_wav_path=CLIP,
                                    reference_wav_path=CLIP)


@pytest.mark.parametrize("mode", list(MODES))
def test_each_segment_equals_the_official_prompt_cache_continuation(golden_engine, official, mode):
    chunks, stream = run(golden_engine, SynthesisRequest(text=TEXT, seed=11, **MODES[mode]))
    plan = stream.plan
    assert len(plan.spoken) == 4 and plan.report.retries == []
    latents = [np.stack([c.latents for c in chunks if c.segment == k]) for k in range(len(plan.spoken))]
    original = _official_cache(official, mode)
    for k in range(1, len(plan.spoken)):
        tail = torch.from_numpy(latents[k - 1]).transpose(1, 2)  # [n, P, D], as the official holds patches
        cache = official.merge_prompt_cache(original, plan.spoken.segment(k - 1), tail)
        noise = seed_noise(plan.report.seeds[k], 4096, 64, 4).transpose(1, 2).numpy()  # [n, D, P]
        record = []
        with fed_noise(official, noise, record):
            official.generate_with_prompt_cache(target_text=plan.spoken.segment(k), prompt_cache=cache,
                                                min_len=2, max_len=4096, inference_timesteps=10, cfg_value=2.0)
        ours = latents[k]
        assert ours.shape[0] == len(record), f"segment {k}: {ours.shape[0]} patches, official {len(record)}"
        err = np.linalg.norm(ours - np.stack(record)) / np.linalg.norm(np.stack(record))
        assert err < 1e-4, f"segment {k}: latents differ from the official by {err:.2e}"


def continuous_decode(engine: Engine, chunks) -> np.ndarray:
    """The chunks' latents decoded as one stream from silence, patch by patch through one fresh
    decoder state (equal to the whole-sequence decode: tests/unit/test_stream_whole.py), which a CPU
    does far faster than one long decode."""
    state = engine.vae.new_decoder_state(1)
    with torch.inference_mode():
        return np.concatenate([engine.vae.decode_chunk(torch.from_numpy(c.latents)[None], state)[0].numpy()
                               for c in chunks])


def _jumps(audio: np.ndarray, at: list[int]) -> np.ndarray:
    """How far the waveform moves from the sample before each boundary to the sample after,
    relative to the typical step inside a chunk."""
    return np.abs(audio[at] - audio[np.asarray(at) - 1])


def test_segments_decode_as_one_continuous_stream(golden_engine):
    chunks, stream = run(golden_engine, SynthesisRequest(text=TEXT, seed=3))
    audio = np.concatenate([c.audio for c in chunks])
    whole = continuous_decode(golden_engine, chunks)
    err = np.linalg.norm(audio - whole) / np.linalg.norm(whole)
    assert audio.shape == whole.shape and err < 1e-5, f"the stream differs from one decode by {err:.2e}"
    n = golden_engine.cfg.patch_samples
    starts = [i * n for i in range(1, len(chunks))]
    seams = [i * n for i, (a, b) in enumerate(zip(chunks, chunks[1:]), 1) if a.segment != b.segment]
    ordinary = [s for s in starts if s not in seams]
    seam_jump, chunk_jump = _jumps(audio, seams), _jumps(audio, ordinary)
    record_figure(f"long text: {len(seams)} segment boundaries, largest jump {seam_jump.max():.4f}; "
                  f"{len(ordinary)} chunk boundaries, largest jump {chunk_jump.max():.4f} (tiny model)")
    assert len(seams) == 3
    assert seam_jump.max() <= chunk_jump.max()


@pytest.fixture(scope="module")
def runaway_engine():
    path = write_tiny_checkpoint(tempfile.mkdtemp(prefix="voxcpm2-never-stops-"), fast_vae=True, never_stops=True)
    engine = Engine.from_pretrained(str(path), device="cpu", dtype="float32", warmup=False, max_streams=2)
    engine.preparer.segment_weight = 4  # "Hi." and " Yo." are a segment each
    # Generation far ahead of playback, as on a GPU, however busy this CPU is: the listeners' clock
    # runs at a hundredth of the wall's, so the runaway guard holds audio (tests/unit/test_segment_hold.py
    # covers generation near real time, where held audio goes out before the listener runs dry).
    engine.scheduler.clock = lambda: time.monotonic() / 100
    return engine


def test_a_runaway_segment_is_retried_then_cut_and_nothing_held_is_lost(runaway_engine, caplog):
    caplog.set_level(logging.INFO, logger="voxcpm")
    worker = EngineWorker(runaway_engine)
    try:
        job = worker.submit(SynthesisRequest(text="Hi. Yo.", seed=40))
        audio = np.concatenate(list(job))
        status = job.status()
    finally:
        worker.close()
    tokens = [len(runaway_engine.tokenizer.encode(t)) for t in ("Hi.", " Yo.")]
    caps = [6 * t + 10 for t in tokens]
    # Segment 1 streams at once and is cut at its cap; segment 2 runs away at 6 patches per token
    # twice (seeds 41 and 42), and its third attempt (seed 43) is cut at the cap.
    assert status["retries"] == [{"segment": 1, "patches": 6 * tokens[1], "seed": 41},
                                 {"segment": 1, "patches": 6 * tokens[1], "seed": 42}]
    assert status["seeds"] == [40, 43] and status["cut_segments"] == [0, 1]
    n = runaway_engine.cfg.patch_samples
    assert status["segment_ends"] == [caps[0] * n, (caps[0] + caps[1]) * n] and audio.shape[0] == sum(caps) * n
    assert caplog.text.count("ran away") >= 2 and "retries=2" in caplog.text


def test_a_retry_rewinds_the_decoder_to_the_segment_start(runaway_engine):
    chunks, stream = run(runaway_engine, SynthesisRequest(text="Hi. Yo.", seed=40))
    assert len(stream.plan.report.retries) == 2
    assert [c.index for c in chunks] == list(range(len(chunks)))
    audio = np.concatenate([c.audio for c in chunks])
    whole = continuous_decode(runaway_engine, chunks)
    assert np.linalg.norm(audio - whole) / np.linalg.norm(whole) < 1e-5, "a rejected attempt leaked into the decoder"


def test_twenty_thousand_characters_stream_to_the_end_with_flat_memory():
    path = write_tiny_checkpoint(tempfile.mkdtemp(prefix="voxcpm2-fast-vae-"), fast_vae=True)
    engine = Engine.from_pretrained(str(path), device="cpu", dtype="float32", warmup=False, max_streams=2)
    engine.preparer.segment_weight = 100  # the tiny model's cache holds 512 positions
    sentences = ["The quick brown fox jumps over the lazy dog.", "It was a bright cold day in April.",
                 "Numbers like 1,250 and 3.5 are fine too.", "Then everyone went home, tired and happy."]
    text = ""
    while len(text) < 20000:
        text += sentences[len(text) % 4] + " "
    text = text[:20000]
    # Two diffusion steps per patch, not ten: memory and prompt length do not depend on them, and CI time does.
    stream, patches, curve, prompts = engine.start(SynthesisRequest(text=text, seed=1, inference_timesteps=2)), 0, [], []
    segments = len(stream.plan.spoken)
    while not stream.done:
        if stream.join is not None:
            prompts.append(len(stream.join.prompt))
        patches += sum(len(chunks) for s, chunks in engine.step() if s is stream)
        if patches // 100 > len(curve):
            curve.append(rss_mb())
    assert stream.error is None and stream.plan.segment == segments, "the text was not spoken to the end"
    quarter = max(1, len(curve) // 4)
    early, late = max(curve[:quarter]), max(curve[-quarter:])
    record_figure(f"long text: 20,000 characters, {segments} segments, {patches} patches; RSS per 100 patches "
                  f"(MB): {' '.join(f'{v:.0f}' for v in curve)}; prompt positions {min(prompts)}-{max(prompts)}")
    assert late - early < 40, f"memory grew from {early:.0f} MB to {late:.0f} MB"
    assert max(prompts[len(prompts) // 2:]) <= max(prompts[: len(prompts) // 2]) + 40, "prompts grow with the text"
