"""Encoded once: a ReferenceClip is encoded by the VAE once per padding side, later requests reuse
its patches (the encoder is not called: counted), and the audio equals that of the raw clip."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from inference import ReferenceClip, SynthesisRequest
from inference.request.reference import encoder_identity
from inference.model.tiny_checkpoint import write_tiny_checkpoint
from ui.library.uploads import decode_audio

from ..fixtures.engines import CountingEncoder
from ..support.app_helpers import load_engine

VOICE = Path(__file__).resolve().parents[2] / "assets" / "voices" / "guide_en.wav"
TEXT = "Hello world, this is a test."


@pytest.fixture(scope="module")
def engine():
    engine = load_engine()
    engine.counter = CountingEncoder(engine)
    return engine


def clip_audio():
    return decode_audio(VOICE.read_bytes(), max_seconds=60)


def ultimate(clip, **kw):
    return SynthesisRequest(TEXT, reference_audio=clip, prompt_audio=clip, prompt_text="Welcome to the museum.",
                            seed=3, max_len=4, **kw)


def test_a_clip_is_encoded_once_per_side_and_gives_the_raw_clips_audio(engine):
    rate, audio = clip_audio()
    want = engine.synthesize(ultimate((rate, audio)))
    clip = ReferenceClip(rate, audio)
    before = engine.counter.calls
    first = engine.synthesize(ultimate(clip))
    assert engine.counter.calls - before == 2  # the reference (right-padded) and the prompt (left-padded)
    again = engine.synthesize(ultimate(clip))
    cloning = engine.synthesize(SynthesisRequest(TEXT, reference_audio=clip, seed=3, max_len=4))
    assert engine.counter.calls - before == 2, "a remembered clip must not reach the VAE encoder again"
    np.testing.assert_array_equal(first, want)
    np.testing.assert_array_equal(again, want)
    assert cloning.size > 0
    assert set(clip.known(engine.encoder_identity)) == {"left", "right"}


def test_patches_given_up_front_skip_loading_and_encoding(engine):
    rate, audio = clip_audio()
    donor = ReferenceClip(rate, audio)
    want = engine.synthesize(ultimate(donor))
    loads = []
    saved = ReferenceClip(rate, load=lambda: loads.append(1) or audio,
                          latents={(engine.encoder_identity, s): p for s, p in donor.known(engine.encoder_identity).items()})
    before = engine.counter.calls
    np.testing.assert_array_equal(engine.synthesize(ultimate(saved)), want)
    assert engine.counter.calls == before and not loads


def test_patches_of_another_checkpoint_are_not_used(engine):
    rate, audio = clip_audio()
    told = []
    stale = {("another-encoder", "right"): np.zeros(1)}
    clip = ReferenceClip(rate, load=lambda: audio, latents=stale, on_encoded=lambda k, p: told.append(k))
    before = engine.counter.calls
    engine.synthesize(SynthesisRequest(TEXT, reference_audio=clip, seed=3, max_len=2))
    assert engine.counter.calls == before + 1
    assert told == [(engine.encoder_identity, "right")]


def test_encoder_identity_follows_the_weights(engine, tmp_path):
    same = encoder_identity(load_engine(warmup=False).vae, engine.cfg.vae.sample_rate, engine.cfg.prompt_pad_samples)
    assert same == engine.encoder_identity
    write_tiny_checkpoint(str(tmp_path), seed=1)
    from inference import Engine

    other = Engine.from_pretrained(str(tmp_path), device="cpu", dtype="float32", warmup=False)
    assert other.encoder_identity != engine.encoder_identity
