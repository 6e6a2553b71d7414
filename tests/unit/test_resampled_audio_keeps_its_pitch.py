"""The OpenAI route's resampling (the listener's Output, inference/request/listener.py, through
ui/services/audio.py's Encoder): a 1 kHz tone fed patch
by patch at the model's 48 kHz comes out at the rate asked for still at 1 kHz, with no click at the
patches' joins, every sample there once the resampler's tail is flushed, and after the time-stretch
when a speed is asked (issue 35)."""
from __future__ import annotations

import io

import numpy as np
import pytest
import soundfile as sf

from inference.request.listener import Output
from ui.services import audio

MODEL_RATE, PATCH = 48000, 7680  # a 160 ms patch
TONE_HZ = 1000.0


def tone(seconds: float) -> np.ndarray:
    t = np.arange(round(seconds * MODEL_RATE)) / MODEL_RATE
    return (0.5 * np.sin(2 * np.pi * TONE_HZ * t)).astype(np.float32)


class Encoder:
    """What the route does with each chunk for a listener at `speed` sent `rate`: the listener's
    Output (ui/http/listen.heard), then the format's encoder."""

    def __init__(self, fmt: str, model_rate: int, speed: float, rate: int):
        self.encoder = audio.Encoder(fmt, rate)
        self.output = Output(speed, model_rate, rate)

    def feed(self, chunk: np.ndarray) -> bytes:
        return self.encoder.encode(self.output.feed(chunk))

    def finish(self) -> bytes:
        return self.encoder.encode(self.output.finish()) + self.encoder.finish()


def through(encoder: Encoder, audio: np.ndarray) -> np.ndarray:
    """The encoder's pcm output for `audio` fed in patches, as float."""
    data = b"".join(encoder.feed(audio[i:i + PATCH]) for i in range(0, audio.size, PATCH)) + encoder.finish()
    return np.frombuffer(data, "<i2") / 32767.0


def peak_hz(audio: np.ndarray, rate: int) -> float:
    """The spectrum's peak, between bins by the parabola through the log magnitudes around it."""
    spectrum = np.abs(np.fft.rfft(audio * np.hanning(audio.size)))
    k = int(np.argmax(spectrum))
    a, b, c = np.log(spectrum[k - 1:k + 2])
    return (k + 0.5 * (a - c) / (a - 2 * b + c)) * rate / audio.size


def residual_db(audio: np.ndarray, rate: int) -> float:
    """What is left of the middle once the best 1 kHz sine is taken out, against the tone (dB): a
    click at a join, a dropped or doubled sample would leave far more than rounding does."""
    middle = audio[audio.size // 8: -audio.size // 8]
    t = np.arange(middle.size) / rate
    basis = np.stack([np.sin(2 * np.pi * TONE_HZ * t), np.cos(2 * np.pi * TONE_HZ * t)], axis=1)
    fit = basis @ np.linalg.lstsq(basis, middle, rcond=None)[0]
    return 20 * np.log10(np.std(middle - fit) / np.std(middle))


@pytest.mark.parametrize("rate, speed", [(24000, 1.0), (16000, 1.0), (16000, 2.0)])
def test_a_1khz_tone_keeps_its_pitch_at_the_rate_asked(rate, speed):
    source = tone(2.0)
    got = through(Encoder("pcm", MODEL_RATE, speed, rate), source)
    assert got.size == round(source.size / speed) * rate // MODEL_RATE
    assert abs(peak_hz(got, rate) - TONE_HZ) < 2.0
    assert residual_db(got, rate) < -60  # about -90 measured: int16 rounding


def test_a_container_says_the_rate_it_was_resampled_to():
    for fmt in ("wav", "flac"):
        encoder = Encoder(fmt, MODEL_RATE, 1.0, 16000)
        data = b"".join(encoder.feed(p) for p in np.split(tone(0.96), 6)) + encoder.finish()
        audio, rate = sf.read(io.BytesIO(data), dtype="float32")
        assert rate == 16000 and audio.size == 0.96 * 16000
        assert abs(peak_hz(audio, rate) - TONE_HZ) < 2.0


def test_an_encoder_refuses_a_rate_its_format_cannot_carry():
    with pytest.raises(ValueError, match="opus cannot be sent at 44100 Hz"):
        Encoder("opus", MODEL_RATE, 1.0, 44100)
