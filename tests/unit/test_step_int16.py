"""The step makes each patch's int16 samples beside its float32 audio (decode_step.int16_samples),
for every row at once, so that a door at the model's rate sends them as they are instead of
converting each chunk on the event loop (ui/services/audio.to_pcm's NumPy loops let go of the GIL
there). They are to_pcm's bytes exactly; a chunk whose audio something changed carries none."""
from __future__ import annotations

import numpy as np
import torch

from inference import Engine, SynthesisRequest
from inference.runtime.decode_step import int16_samples
from ui.http.listen import Heard
from ui.services.audio import to_pcm

from ..support.app_helpers import tiny_checkpoint


def test_the_steps_int16_rounding_is_to_pcms_at_halves_and_past_full_scale():
    rng = np.random.default_rng(5)
    halves = (np.arange(-8, 9) + 0.5) / 32767.0  # ties: rounded to even, as np.rint does
    edges = [0.0, 1.0, -1.0, 1.0001, -1.0001, 2.0, -2.0, 1e-9, -1e-9, 32767.5 / 32767, -32768.5 / 32767]
    audio = np.concatenate([halves, edges, 0.4 * rng.standard_normal(4000)]).astype(np.float32)
    assert int16_samples(torch.from_numpy(audio)).numpy().astype("<i2").tobytes() == to_pcm(audio)


def test_every_chunk_the_engine_streams_carries_the_bytes_the_doors_would_make():
    engine = Engine.from_pretrained(tiny_checkpoint(), device="cpu", dtype="float32", warmup=False, max_streams=2)
    engine.preparer.segment_weight = 4  # a segment per sentence: later segments are held, then released
    text = "Hi there. [pause 200ms] So it is. We are here."
    chunks = list(engine.stream(SynthesisRequest(text=text, seed=7, min_len=3, max_len=5)))
    speech, pauses = [c for c in chunks if not c.pause], [c for c in chunks if c.pause]
    assert pauses and len({c.segment for c in speech}) >= 3
    assert all(c.pcm is None for c in pauses), "a pause's silence is made on the host, not by the step"
    for c in speech:
        assert c.pcm == to_pcm(c.audio), f"chunk {c.index} of segment {c.segment}"


def test_a_chunk_cut_short_keeps_the_bytes_of_what_it_keeps():
    """The bound on a request's audio cuts its last chunk (inference/serving/delivery.py): the
    int16 bytes are cut with the samples, or the wire would carry the whole patch."""
    from inference.request.request import AudioChunk

    audio = np.linspace(-0.5, 0.5, 96, dtype=np.float32)
    cut = AudioChunk(audio, None, 0, pcm=to_pcm(audio)).head(40)
    assert len(cut.audio) == 40 and cut.pcm == to_pcm(audio[:40])
    assert AudioChunk(audio, None, 0).head(40).pcm is None


def test_a_piece_sends_the_steps_bytes_or_converts_what_it_has():
    audio = np.linspace(-0.5, 0.5, 96, dtype=np.float32)
    made = Heard(audio, 0, None, pcm=b"\x01\x00" * 96)
    assert made.int16() == b"\x01\x00" * 96, "the step's bytes are sent as they are"
    assert Heard(audio, 0, None).int16() == to_pcm(audio)
