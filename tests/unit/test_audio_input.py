"""Audio in: parity with the official librosa.load(path, sr=16000, mono=True), and every refusal."""
import wave

import numpy as np
import pytest
import soundfile as sf

from inference.request.audio_input import load_audio, pad_to_multiple
from inference.errors import AudioInputError

RATE = 16000
TOL = 1e-6  # the brief's bound; the pipeline is the same, so the measured difference is 0


def speechlike(rate: int, seconds: float, channels: int = 1, seed: int = 0) -> np.ndarray:
    """Float64 in [-0.8, 0.8]: modulated harmonics plus noise, so resampling has real content."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(rate * seconds)) / rate
    cols = []
    for c in range(channels):
        f0 = 140.0 + 30 * c
        tone = sum(np.sin(2 * np.pi * f0 * k * t + k) / k for k in range(1, 12))
        envelope = 0.5 + 0.5 * np.sin(2 * np.pi * 3 * t + c)
        cols.append(tone * envelope + 0.05 * rng.standard_normal(t.size))
    x = np.stack(cols, axis=1)
    return 0.8 * x / np.abs(x).max()


def librosa_load(path) -> np.ndarray:
    librosa = pytest.importorskip("librosa")
    return librosa.load(str(path), sr=RATE, mono=True)[0]


def assert_parity(ours: np.ndarray, path):
    ref = librosa_load(path)
    assert ours.dtype == np.float32 and ours.ndim == 1
    assert ours.shape == ref.shape
    assert np.abs(ours - ref).max() <= TOL


@pytest.mark.parametrize("rate, channels, subtype, ext", [
    (22050, 2, "PCM_16", "wav"),
    (44100, 1, "FLOAT", "wav"),
    (8000, 1, "PCM_16", "wav"),
    (16000, 1, "PCM_16", "wav"),  # no resampling at all
    (48000, 2, "PCM_24", "flac"),
    (32000, 6, "PCM_16", "wav"),  # 5.1 down-mix
])
def test_file_matches_librosa(tmp_path, rate, channels, subtype, ext):
    path = tmp_path / f"clip.{ext}"
    sf.write(path, speechlike(rate, 1.3, channels), rate, subtype=subtype)
    assert_parity(load_audio(path, target_rate=RATE), path)
    assert_parity(load_audio(str(path), target_rate=RATE), path)


def test_bytes_match_librosa(tmp_path):
    path = tmp_path / "clip.wav"
    sf.write(path, speechlike(22050, 0.7, 2), 22050, subtype="PCM_16")
    assert_parity(load_audio(path.read_bytes(), target_rate=RATE), path)


@pytest.mark.parametrize("dtype, subtype", [(np.int16, "PCM_16"), (np.int32, "PCM_32"), (np.float64, "FLOAT")])
@pytest.mark.parametrize("channels", [1, 2])
def test_gradio_pair_matches_the_file_gradio_would_write(tmp_path, dtype, subtype, channels):
    x = speechlike(22050, 0.9, channels, seed=3)
    if np.issubdtype(dtype, np.integer):
        x = np.round(x * np.iinfo(dtype).max).astype(dtype)
    x = x[:, 0] if channels == 1 else x
    path = tmp_path / "gradio.wav"
    sf.write(path, x.astype(np.float32) if dtype == np.float64 else x, 22050, subtype=subtype)
    assert_parity(load_audio((22050, x), target_rate=RATE), path)
    assert_parity(load_audio((np.int64(22050), x), target_rate=RATE), path)  # numpy ints as rates


def test_uint8_pair_matches_an_8bit_wav(tmp_path):
    x = np.round(speechlike(11025, 0.5)[:, 0] * 127 + 128).astype(np.uint8)
    path = tmp_path / "u8.wav"
    with wave.open(str(path), "wb") as w:  # written without libsndfile, an independent encoder
        w.setnchannels(1), w.setsampwidth(1), w.setframerate(11025)
        w.writeframes(x.tobytes())
    assert_parity(load_audio((11025, x), target_rate=RATE), path)


def test_int_scaling_is_libsndfiles():
    got = load_audio((RATE, np.array([-32768, 0, 16384, 32767], np.int16)), target_rate=RATE)
    np.testing.assert_array_equal(got, np.array([-1.0, 0.0, 0.5, 32767 / 32768], np.float32))
    got = load_audio((RATE, np.array([-128, 64, 0, 127], np.int8)), target_rate=RATE)
    np.testing.assert_array_equal(got, np.array([-1.0, 0.5, 0.0, 127 / 128], np.float32))


def test_length_is_ceil_of_the_ratio():
    for n in (1, 7, 44099, 44101):
        x = np.full(n, 0.5, np.float32)
        assert len(load_audio((44100, x), target_rate=RATE)) == int(np.ceil(n * RATE / 44100))


def refusal(source, *, match, max_seconds=60.0) -> str:
    with pytest.raises(AudioInputError, match=match) as info:
        load_audio(source, target_rate=RATE, max_seconds=max_seconds, label="reference audio")
    message = str(info.value)
    assert message.startswith("reference audio: ")
    return message


def write(path, data, rate, subtype="PCM_16"):
    sf.write(path, data, rate, subtype=subtype)
    return path


def test_refuses_empty_file(tmp_path):
    (tmp_path / "empty.wav").write_bytes(b"")
    assert "WAV, FLAC" in refusal(tmp_path / "empty.wav", match=r"is empty \(0 bytes\)")
    refusal(b"", match=r"the data is empty")


def test_refuses_wav_without_samples(tmp_path):
    refusal(write(tmp_path / "none.wav", np.zeros(0, np.int16), RATE), match="no samples")
    refusal((RATE, np.zeros(0, np.int16)), match="no samples")
    refusal((RATE, np.zeros((RATE, 0), np.int16)), match="no samples")


def test_refuses_text_renamed_wav(tmp_path):
    (tmp_path / "notes.wav").write_text("these are my meeting notes\n" * 20)
    message = refusal(tmp_path / "notes.wav", match=r"cannot be read as audio \(Format not recognised\)")
    assert "WAV, FLAC, OGG or MP3" in message and "(sample_rate, array)" in message


def test_refuses_truncated_header(tmp_path):
    full = write(tmp_path / "full.wav", np.zeros(1000, np.int16), RATE).read_bytes()
    (tmp_path / "cut.wav").write_bytes(full[:20])
    refusal(tmp_path / "cut.wav", match="cannot be read as audio")


def test_refuses_missing_path(tmp_path):
    refusal(tmp_path / "nope.wav", match="does not exist")
    refusal(tmp_path, match="is a folder")


@pytest.mark.parametrize("data", [
    np.zeros(RATE, np.int16),  # digital silence
    np.random.default_rng(0).integers(-3, 4, RATE).astype(np.int16),  # dither, about -80 dBFS
])
def test_refuses_silence(tmp_path, data):
    refusal(write(tmp_path / "quiet.wav", data, RATE), match=r"silent \(peak .* dBFS, below the -60 dBFS floor\)")
    refusal((RATE, data), match="silent")


def test_quiet_speech_is_kept():
    quiet = (speechlike(RATE, 0.5)[:, 0] * 10 ** (-40 / 20)).astype(np.float32)  # -42 dBFS peak
    assert np.abs(load_audio((RATE, quiet), target_rate=RATE)).max() > 0


def test_refuses_nan_and_inf(tmp_path):
    x = speechlike(RATE, 0.2)[:, 0].astype(np.float32)
    x[100] = np.nan
    refusal(write(tmp_path / "nan.wav", x, RATE, "FLOAT"), match="NaN or infinite")
    x[100] = np.inf
    refusal((RATE, x), match="NaN or infinite")


def test_refuses_sample_rates_out_of_range(tmp_path):
    low = write(tmp_path / "low.wav", np.round(speechlike(4000, 0.5) * 30000).astype(np.int16), 4000)
    assert "8000 Hz to 192000 Hz" in refusal(low, match="sample rate 4000 Hz is outside")
    refusal((400_000, speechlike(400_000, 0.1)), match="sample rate 400000 Hz is outside")
    refusal((16000.5, speechlike(RATE, 0.1)), match="not a whole number")


def test_refuses_too_long(tmp_path):
    long_file = write(tmp_path / "long.wav", np.round(speechlike(8000, 61) * 30000).astype(np.int16), 8000)
    refusal(long_file, match=r"the clip is 61\.0 s long; the limit is 60 s")
    refusal((RATE, speechlike(RATE, 2.5)), max_seconds=2, match=r"2\.5 s long; the limit is 2 s")


@pytest.mark.parametrize("source, match", [
    ((RATE, np.zeros((2, RATE), np.float32) + 0.1), r"shape \(2, 16000\).*transpose"),
    ((RATE, np.zeros((RATE, 10), np.float32) + 0.1), r"shape \(16000, 10\)"),
    ((RATE, np.zeros((4, 4, 4), np.float32) + 0.1), r"shape \(4, 4, 4\)"),
    ((RATE, np.ones(RATE, np.int64)), "dtype int64"),
    ((RATE, np.ones(RATE, np.complex64)), "dtype complex64"),
    ((np.ones(RATE, np.float32), RATE), r"\(sample_rate, numpy array\)"),
    ((RATE, [0.1, 0.2]), r"\(sample_rate, numpy array\)"),
    ([0.1, 0.2], "cannot use a list"),
])
def test_refuses_odd_arrays(source, match):
    assert "int16" in refusal(source, match=match)  # every refusal lists what is accepted


def test_refuses_many_channels_in_a_file(tmp_path):
    path = write(tmp_path / "many.wav", speechlike(RATE, 0.2, channels=10), RATE)
    refusal(path, match="10 channels is more than the 8 supported")


def test_pad_to_multiple_sides():
    x = np.arange(1, 6, dtype=np.float32)
    left, right = pad_to_multiple(x, 4, "left"), pad_to_multiple(x, 4, "right")
    np.testing.assert_array_equal(left, [0, 0, 0, 1, 2, 3, 4, 5])
    np.testing.assert_array_equal(right, [1, 2, 3, 4, 5, 0, 0, 0])
    assert left.dtype == np.float32
    np.testing.assert_array_equal(pad_to_multiple(x[:4], 4, "left"), x[:4])  # already whole
    assert len(pad_to_multiple(np.ones(2561, np.float32), 2560, "right")) == 5120
    with pytest.raises(ValueError):
        pad_to_multiple(x, 4, "middle")


def test_refuses_channels_that_cancel_out_and_numbers_that_are_not_samples():
    voice = speechlike(RATE, 1.0)[:, 0]
    # Each channel is loud, but one is the other inverted: the mono mix the model would hear is silence.
    assert "once its channels are mixed to mono" in refusal((RATE, np.stack([voice, -voice], axis=1)), match="silent")
    refusal((RATE, voice * 1e5), match=r"far outside \[-1, 1\]")
    # A float file that clips a little past full scale is still audio.
    assert load_audio((RATE, voice / np.abs(voice).max() * 1.5), target_rate=RATE).shape == voice.shape
