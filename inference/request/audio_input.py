"""Reference and prompt audio in: any file libsndfile reads, its bytes, or Gradio's (rate, array).

The result equals what the official package gets from `librosa.load(path, sr=16000, mono=True)`:
libsndfile's float32 decoding, channels averaged, soxr resampling at its high-quality setting, and
the length fixed to ceil(n * target / source). Everything a clip could be wrong with is refused
here, before it reaches the GPU, with a message that says what is accepted.

Files are decoded a block at a time and mixed to mono as they go, so a file never exists as one
float32 array of all its channels: a 30 KB FLAC of 20 s at 192 kHz in 8 channels decodes to 123 MB
that way, and the checks on it (finite, peak) would each add as much again.
"""
from __future__ import annotations

import binascii
import io
import math
import os
import time
from pathlib import Path

import numpy as np
import soundfile as sf
import soxr

from ..config import LIMITS
from ..errors import AudioInputError

MIN_RATE, MAX_RATE = 8_000, 192_000
MAX_CHANNELS = 8
# Peak below -60 dBFS: digital silence, dither (a few 16-bit steps) or a muted microphone. Quiet
# speech peaks some 30 dB above this, so nothing usable is refused.
SILENCE_PEAK = 1e-3
# Float files that clip go a little past 1.0; far beyond it the numbers are not audio samples.
MAX_PEAK = 64.0

# Characters of base64 decoded per call. binascii keeps the GIL for a whole call, 15 ms for a 30 s
# clip at 48 kHz (3.7 MiB of base64) on an intake thread, and the engine's thread and the event loop
# wait that long; between two slices of about a millisecond they run. A multiple of 4: only the
# last slice may end in padding, as in the whole.
BASE64_SLICE = 256 * 1024

BLOCK_FRAMES = 2**15  # frames decoded at a time: 1 MiB of float32 at 8 channels

ACCEPTED_FILES = "a WAV, FLAC, OGG or MP3 file (anything libsndfile reads)"
ACCEPTED_ARRAYS = ("a (sample_rate, array) pair with an int8/uint8/int16/int32/float32/float64 array "
                   f"of shape [samples] or [samples, channels] (at most {MAX_CHANNELS} channels)")
ACCEPTED = f"give {ACCEPTED_FILES}, its bytes, or {ACCEPTED_ARRAYS}"

# Integer PCM is scaled the way libsndfile scales it on float reads, so an array and the WAV file
# Gradio would have written from it decode to the same floats.
_INT_SCALE = {np.dtype(np.int8): 2.0**-7, np.dtype(np.int16): 2.0**-15, np.dtype(np.int32): 2.0**-31}


def load_audio(source, *, target_rate: int, max_seconds: float = LIMITS.max_audio_seconds,
               label: str = "audio") -> np.ndarray:
    """Decode, down-mix and resample `source` to float32 mono at `target_rate`.

    `label` names the input in refusals ("reference audio", "prompt audio").
    """
    if isinstance(source, (str, os.PathLike, bytes, bytearray, memoryview)):
        rate, mono = _from_file(source, label, max_seconds)
        return resample(mono, rate, target_rate)
    if not isinstance(source, tuple):
        raise AudioInputError(f"{label}: cannot use a {type(source).__name__}; {ACCEPTED}")
    rate, frames = _from_pair(source, label)
    _check_rate(rate, label)
    _check_samples(frames, rate, label, max_seconds)
    mono = _mono(frames)
    if frames.shape[1] > 1:  # loud channels can still cancel out in the mix (one inverted)
        _check_audible(float(np.abs(mono).max()), label, "once its channels are mixed to mono")
    return resample(mono, rate, target_rate)


def decode_mono(f: sf.SoundFile, label: str) -> np.ndarray:
    """An open file's samples as float32 mono, decoded BLOCK_FRAMES at a time and checked as they
    come (finite, not far outside [-1, 1], audible before and after mixing), exactly as the whole
    array would be. Reads no further than the header's length, as soundfile's read() does."""
    channels = f.channels
    if not 1 <= channels <= MAX_CHANNELS:
        raise AudioInputError(f"{label}: {channels} channels is more than the {MAX_CHANNELS} supported; "
                              "give a mono or stereo clip")
    mono = np.empty(max(f.frames, 0), np.float32)
    block = np.empty((min(BLOCK_FRAMES, mono.shape[0]), channels), np.float32)
    done, peak, mixed_peak = 0, 0.0, 0.0
    while done < mono.shape[0]:
        got = f.read(min(block.shape[0], mono.shape[0] - done), dtype="float32", always_2d=True, out=block)
        if got.shape[0] == 0:
            break
        if not np.isfinite(got).all():
            raise _not_finite(label)
        peak = max(peak, float(np.abs(got).max()))
        mixed = mono[done:done + got.shape[0]]
        _mix_into(got, mixed)
        mixed_peak = max(mixed_peak, float(np.abs(mixed).max()))
        done += got.shape[0]
    mono = mono[:done]
    if done == 0:
        raise AudioInputError(f"{label}: the clip has no samples; give a few seconds of clear speech")
    _check_peak(peak, label)
    if channels > 1:
        _check_audible(mixed_peak, label, "once its channels are mixed to mono")
    return mono


def _mix_into(frames: np.ndarray, out: np.ndarray):
    # The same reduction as _mono, per block: each output sample depends on its own frame only.
    if frames.shape[1] > 1:
        np.mean(frames.T, axis=0, out=out)
    else:
        out[:] = frames[:, 0]


def pad_to_multiple(audio: np.ndarray, multiple: int, side: str) -> np.ndarray:
    """Zero-pad to a whole number of `multiple` samples on the left or the right."""
    if side not in ("left", "right"):
        raise ValueError(f"side must be 'left' or 'right', got {side!r}")
    if multiple <= 0:
        raise ValueError(f"multiple must be positive, got {multiple}")
    short = -len(audio) % multiple
    if short == 0:
        return audio
    pad = (short, 0) if side == "left" else (0, short)
    return np.pad(audio, pad)


def _from_file(source, label: str, max_seconds: float) -> tuple[int, np.ndarray]:
    """(rate, float32 mono) of a path or bytes; length, rate and channels checked before decoding."""
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        if not path.is_file():
            what = "is a folder" if path.is_dir() else "does not exist"
            raise AudioInputError(f"{label}: {path} {what}; {ACCEPTED}")
        if path.stat().st_size == 0:
            raise AudioInputError(f"{label}: {path} is empty (0 bytes); {ACCEPTED}")
        opened, name = str(path), str(path)
    else:
        opened, name = io.BytesIO(bytes(source)), f"the {len(source)} bytes given"
        if len(source) == 0:
            raise AudioInputError(f"{label}: the data is empty (0 bytes); {ACCEPTED}")
    try:
        with sf.SoundFile(opened) as f:
            rate = f.samplerate
            # The header gives the length: refuse an hour-long file before decoding it.
            if f.frames > 0 and rate > 0 and f.frames / rate > max_seconds:
                raise _too_long(label, f.frames / rate, max_seconds)
            _check_rate(rate, label)
            mono = decode_mono(f, label)
    except (sf.LibsndfileError, RuntimeError, EOFError) as exc:
        raise AudioInputError(f"{label}: {name} cannot be read as audio ({_reason(exc)}); {ACCEPTED}") from exc
    return rate, mono


def _from_pair(pair: tuple, label: str) -> tuple[int, np.ndarray]:
    if len(pair) != 2 or isinstance(pair[0], np.ndarray) or not isinstance(pair[1], np.ndarray):
        raise AudioInputError(f"{label}: a tuple must be (sample_rate, numpy array) as Gradio gives it; {ACCEPTED}")
    rate, array = pair
    if not _is_whole_number(rate):
        raise AudioInputError(f"{label}: sample rate {rate!r} is not a whole number of Hz; {ACCEPTED}")
    return int(rate), _pcm_to_float(array, label)


def _is_whole_number(value) -> bool:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        return False
    return math.isfinite(value) and float(value).is_integer()


def _pcm_to_float(array: np.ndarray, label: str) -> np.ndarray:
    if array.ndim == 1:
        array = array[:, None]
    if array.ndim != 2 or array.shape[1] > MAX_CHANNELS:
        transposed = array.ndim == 2 and array.shape[0] <= MAX_CHANNELS
        hint = " (it looks like [channels, samples]: transpose it)" if transposed else ""
        raise AudioInputError(f"{label}: array shape {array.shape} is not usable{hint}; {ACCEPTED}")
    dtype = array.dtype
    if dtype in _INT_SCALE:
        return array.astype(np.float32) * np.float32(_INT_SCALE[dtype])
    if dtype == np.uint8:
        return (array.astype(np.float32) - 128) * np.float32(2.0**-7)
    if dtype in (np.float32, np.float64):
        return array.astype(np.float32)
    raise AudioInputError(f"{label}: array dtype {dtype} is not usable; {ACCEPTED}")


def _check_rate(rate: int, label: str):
    if not MIN_RATE <= rate <= MAX_RATE:
        raise AudioInputError(f"{label}: sample rate {rate} Hz is outside the supported "
                              f"{MIN_RATE} Hz to {MAX_RATE} Hz; record or export at a rate in that range "
                              "(16 to 48 kHz is usual)")


def _check_samples(frames: np.ndarray, rate: int, label: str, max_seconds: float):
    count, channels = frames.shape
    if channels > MAX_CHANNELS:
        raise AudioInputError(f"{label}: {channels} channels is more than the {MAX_CHANNELS} supported; "
                              "give a mono or stereo clip")
    if count == 0 or channels == 0:
        raise AudioInputError(f"{label}: the clip has no samples; give a few seconds of clear speech")
    if count / rate > max_seconds:
        raise _too_long(label, count / rate, max_seconds)
    if not np.isfinite(frames).all():
        raise _not_finite(label)
    _check_peak(float(np.abs(frames).max()), label)


def _not_finite(label: str) -> AudioInputError:
    return AudioInputError(f"{label}: the clip holds NaN or infinite samples; give finite samples, "
                           "floats in [-1, 1] or integer PCM")


def _check_peak(peak: float, label: str):
    if peak > MAX_PEAK:
        raise AudioInputError(f"{label}: the clip holds samples far outside [-1, 1] (peak {peak:.3g}), so "
                              "it is not a recording; give floats in [-1, 1] or integer PCM")
    _check_audible(peak, label)


def _check_audible(peak: float, label: str, when: str = ""):
    if peak < SILENCE_PEAK:
        when = f" {when}" if when else ""
        raise AudioInputError(f"{label}: the clip is silent{when} (peak {_dbfs(peak)}, below the "
                              f"{_dbfs(SILENCE_PEAK)} floor); give a clip of audible speech")


def _mono(frames: np.ndarray) -> np.ndarray:
    # Averaging over the leading axis of the [channels, samples] view is librosa's to_mono, so the
    # float32 sums happen in the same order and the result matches it bit for bit.
    return np.mean(frames.T, axis=0) if frames.shape[1] > 1 else frames[:, 0]


def resample(audio: np.ndarray, rate: int, target_rate: int) -> np.ndarray:
    """float32 mono from `rate` to `target_rate`, as librosa.load does it (soxr HQ, exact length)."""
    if rate == target_rate:
        return np.ascontiguousarray(audio, dtype=np.float32)
    out = soxr.resample(np.ascontiguousarray(audio), rate, target_rate, quality="HQ")
    # soxr may give one sample more or less than the exact ratio; librosa fixes the length.
    wanted = int(math.ceil(len(audio) * float(target_rate) / rate))
    if len(out) >= wanted:
        out = out[:wanted]
    else:
        out = np.pad(out, (0, wanted - len(out)))
    return np.ascontiguousarray(out, dtype=np.float32)


def _too_long(label: str, seconds: float, limit: float) -> AudioInputError:
    return AudioInputError(f"{label}: the clip is {seconds:.1f} s long; the limit is {limit:g} s: "
                           "trim it (5 to 20 s of speech is plenty)")


def _dbfs(peak: float) -> str:
    return "-inf dBFS" if peak <= 0 else f"{20 * math.log10(peak):.0f} dBFS"


def _reason(exc: Exception) -> str:
    # libsndfile's own words ("Format not recognised.") without soundfile's "Error opening <path>".
    text = getattr(exc, "error_string", None) or str(exc) or type(exc).__name__
    return text.strip().rstrip(".")


def decode_base64(encoded: str) -> bytes:
    """A clip sent as base64 text (a body's data: URL), strictly: only the alphabet, padding only at
    the end (ValueError otherwise), decoded a slice at a time."""
    return b"".join(_decoded_slice(encoded[at:at + BASE64_SLICE]) for at in range(0, len(encoded), BASE64_SLICE))


def _decoded_slice(encoded: str) -> bytes:
    data = binascii.a2b_base64(encoded, strict_mode=True)
    # The GIL offered at once: a thread that waits for it would otherwise ask only after the switch
    # interval (5 ms), and this one would run on into the next slice.
    time.sleep(0)
    return data
