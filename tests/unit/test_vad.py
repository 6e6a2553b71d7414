"""Trimming a clip's silent ends (issue 11, item 4): Silero VAD finds where the speech of a real
recording starts and ends inside added silence; a request with trim_silence encodes exactly the
trimmed clip, remembered apart from the untrimmed one; clips without speech are kept whole."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from inference import InputError, ReferenceClip, SynthesisRequest
from inference.request.vad import speech_bounds, trim_silence
from ui.library.uploads import decode_audio

from ..support.app_helpers import load_engine
from ..fixtures.engines import CountingEncoder

VOICE = Path(__file__).resolve().parents[2] / "assets" / "voices" / "guide_en.wav"
RATE = 16000


def padded_voice(before_s: float = 1.0, after_s: float = 0.7) -> tuple[np.ndarray, int, int]:
    """The recording inside room tone (-60 dBFS noise): (audio, where it starts, where it ends)."""
    rate, voice = decode_audio(VOICE.read_bytes(), max_seconds=60)
    assert rate == RATE
    start, end = speech_bounds(voice, RATE)  # the recording's own edges, before padding
    rng = np.random.default_rng(0)
    pre, post = (rng.normal(0, 1e-3, int(s * RATE)).astype(np.float32) for s in (before_s, after_s))
    return np.concatenate([pre, voice, post]), len(pre) + start, len(pre) + end


def test_speech_is_found_inside_added_silence():
    audio, start, end = padded_voice()
    got = speech_bounds(audio, RATE)
    assert got is not None
    # within 150 ms: the detector works in 32 ms windows and pads each side by 30 ms
    assert abs(got[0] - start) < 0.15 * RATE and abs(got[1] - end) < 0.15 * RATE, (got, start, end)
    trimmed = trim_silence(audio, RATE)
    assert len(trimmed) < len(audio) - 1.5 * RATE  # the 1.7 s of added room tone is gone
    np.testing.assert_array_equal(trimmed, audio[got[0]:got[1]])


def test_other_rates_map_back_to_their_own_samples():
    audio, start, _ = padded_voice()
    from inference.request.audio_input import resample
    at_48k = resample(audio, RATE, 48000)
    got = speech_bounds(at_48k, 48000)
    assert abs(got[0] - 3 * start) < 0.15 * 48000


def test_a_clip_without_speech_is_kept_whole():
    noise = np.random.default_rng(1).normal(0, 0.01, 2 * RATE).astype(np.float32)
    assert speech_bounds(noise, RATE) is None
    np.testing.assert_array_equal(trim_silence(noise, RATE), noise)


def test_trim_silence_must_be_a_boolean():
    with pytest.raises(InputError, match="trim_silence must be true or false"):
        SynthesisRequest("Hello.", trim_silence="yes")


def test_a_trimmed_request_encodes_the_trimmed_clip_and_remembers_it_apart():
    engine = load_engine()
    counter = CountingEncoder(engine)
    audio, _, _ = padded_voice()
    bounds = speech_bounds(audio, RATE)
    ask = dict(seed=5, max_len=4)
    want = engine.synthesize(SynthesisRequest("Hello there.", reference_audio=(RATE, audio[bounds[0]:bounds[1]]), **ask))
    clip = ReferenceClip(RATE, audio)
    trimmed = engine.synthesize(SynthesisRequest("Hello there.", reference_audio=clip, trim_silence=True, **ask))
    np.testing.assert_array_equal(trimmed, want)
    whole = engine.synthesize(SynthesisRequest("Hello there.", reference_audio=clip, **ask))
    assert not np.array_equal(whole, want)  # untrimmed is another prompt, remembered apart
    calls = counter.calls
    engine.synthesize(SynthesisRequest("Hello there.", reference_audio=clip, trim_silence=True, **ask))
    engine.synthesize(SynthesisRequest("Hello there.", reference_audio=clip, **ask))
    assert counter.calls == calls, "both versions of the clip are remembered"


def test_trimming_keeps_the_process_thread_count():
    """Issue 21 item 4: importing silero-vad calls torch.set_num_threads(1); CPU inference after a
    trim_silence request must still use every thread it had."""
    import subprocess
    import sys
    code = ("import torch; torch.set_num_threads(2); import numpy as np\n"
            "from inference.request.vad import trim_silence\n"
            "trim_silence(np.zeros(16000, np.float32), 16000)\n"
            "print(torch.get_num_threads())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[2])
    assert out.stdout.split()[-1] == "2"
