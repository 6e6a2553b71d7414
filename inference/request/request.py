"""What one synthesis asks for, and what each streamed step gives back."""
from __future__ import annotations

import dataclasses
import secrets
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..errors import InputError
from ..text.spoken import has_content  # noqa: F401 (re-exported)
from .listener import Listener
from .modes import MAX_PATCHES, MAX_SEED, MODES, SETTINGS, default  # noqa: F401 (re-exported for callers)


@dataclass
class SynthesisRequest:
    """The engine's request: every value is checked here, once, when it is made, against the one
    spec (modes.py); what depends on the engine (its limits, the clips' audio, the cache's room) is
    checked by Engine.prepare."""
    text: str
    control: str | None = None
    reference_audio: Any = None  # a path, (sample_rate, numpy array) as Gradio gives it, or a ReferenceClip
    prompt_audio: Any = None
    prompt_text: str | None = None
    cfg_value: float = default("cfg_value")
    inference_timesteps: int = default("inference_timesteps")
    min_len: int = default("min_len")
    max_len: int = default("max_len")
    seed: int | None = None
    # Optional tensor or array [steps, feat_dim, patch_size]: patch i starts from noise[i], so the
    # rows also cap the length, as max_len does (and must number at least min_len).
    noise: Any = None
    # Speak numbers, dates, units and symbols as words (inference/text/normalize.py); off by default,
    # as in the official app.
    normalize: bool = False
    # Cut the silence at both ends of the reference and prompt clips (inference/request/vad.py); off by default.
    trim_silence: bool = False
    # The playback speed the listener gets (applied to the audio by its Listener, not the model):
    # the engine bounds the audio a request may produce after it (Limits.max_output_seconds), and
    # the serving layer reads its consumer's clock by it (inference/serving/delivery.py).
    speed: float = default("speed")
    # A live request's later clauses (inference/request/feed.py: a TextFeed); `text` is its first.
    # None: the text is whole.
    feed: Any = None

    def __post_init__(self):
        _check(isinstance(self.text, str) and has_content(self.text),
               "text is empty: it holds no letters, digits, punctuation or symbols (only spaces, control, "
               "zero-width, combining or direction marks): give the words to speak", "text")
        _check(self.control is None or isinstance(self.control, str), "control must be text or None", "control")
        _check(self.prompt_text is None or isinstance(self.prompt_text, str), "prompt_text must be text or None",
               "prompt_text")
        for name, label in _FREE_TEXT.items():  # JSON can carry lone surrogates; the tokenizer cannot
            _check(getattr(self, name) is None or _is_unicode(getattr(self, name)),
                   f"the {label} holds characters that are not valid Unicode (lone surrogates)", name)
        _check(_is_number(self.cfg_value), f"cfg_value {self.cfg_value!r} must be a number", "cfg_value")
        for name in ("inference_timesteps", "min_len", "max_len"):
            _check(_is_int(getattr(self, name)), f"{name} {getattr(self, name)!r} must be a whole number", name)
        _check(_is_number(self.speed), f"speed {self.speed!r} must be a number", "speed")
        for name in ("cfg_value", "inference_timesteps", "min_len", "max_len", "speed"):
            _check_range(name, getattr(self, name))
        _check(isinstance(self.normalize, bool), f"normalize must be true or false, got {self.normalize!r}",
               "normalize")
        _check(isinstance(self.trim_silence, bool), f"trim_silence must be true or false, got {self.trim_silence!r}",
               "trim_silence")
        _check(self.min_len <= self.max_len, f"min_len ({self.min_len}) must not exceed max_len ({self.max_len})",
               "max_len")
        _check(self.seed is None or _is_int(self.seed), f"seed {self.seed!r} must be a whole number, or none", "seed")
        if self.seed is not None:
            _check_range("seed", self.seed)
        _check(not (self.control or "").strip() or MODES[self.mode].control is not None,
               "a style instruction cannot be used in ultimate cloning: the model would read it aloud. "
               "Leave it empty, or use controllable cloning (reference clip + style instruction).", "control")
        self._check_mode()

    def _check_mode(self):
        """The request has what its mode takes (modes.py): a mode that reads a transcript (ultimate
        cloning) needs it with the prompt clip it transcribes, both or neither."""
        mode = MODES[self.mode]
        if not mode.transcript:
            return
        _check(bool((self.prompt_text or "").strip()),
               f"{mode.title.lower()} needs the exact transcript of the clip: give prompt_text", "prompt_text")
        _check(not mode.clip or self.prompt_audio is not None,
               f"{mode.title.lower()} needs the clip as well as its transcript: give prompt_audio", "prompt_audio")

    @property
    def mode(self) -> str:
        if self.prompt_audio is not None or (self.prompt_text or "").strip():
            return "ultimate"
        return "cloning" if self.reference_audio is not None else "design"

    def listener(self, model_rate: int) -> Listener:
        """Who hears it (inference/request/listener.py), for a model that makes audio at `model_rate`."""
        return Listener(self.speed, model_rate)


@dataclass(frozen=True)
class Half:
    """A patch at half the model's rate, as the step made it (inference/runtime/decode_step.halve):
    what soxr's streaming resampler would give for it (listener.halving_taps), from the half-rate
    sample HALF_REACH / 2 before the patch's own start: its n / 2 samples, then the HALF_REACH
    after them that the audio to come still adds to (their values were it silence)."""
    audio: np.ndarray  # float32 [n / 2 + HALF_REACH]
    pcm: bytes  # the same samples as int16 little-endian, rounded as every door rounds


@dataclass(frozen=True)
class AudioChunk:
    """One piece of a stream's audio, made once by the stream's Continuation, which alone knows
    its place (segment, index) among what the listener was given; nobody changes it afterwards."""
    audio: np.ndarray  # float32, mono, only the samples this patch adds
    latents: np.ndarray | None  # float32 [feat_dim, patch_size]: the patch the audio was decoded from
    index: int  # 0 for the first chunk released
    segment: int = 0  # which segment of the text it speaks (inference/text/segments.py), or follows
    # Silence a pause tag asked for (inference/text/pauses.py): zeros, no latents, the decoder untouched.
    pause: bool = False
    # The audio as the int16 little-endian samples every door sends, when the step made them
    # (inference/runtime/decode_step.int16_samples): a door at the model's rate sends these bytes.
    pcm: bytes | None = None
    # The patch at half the model's rate, when the step made it (OpenAI's pcm, the live socket).
    half: Half | None = None

    def head(self, samples: int) -> "AudioChunk":
        """Its first `samples` samples, its int16 bytes with them (its half-rate patch stays whole:
        listener.Halved takes what the cut leaves of it)."""
        pcm = None if self.pcm is None else self.pcm[: 2 * samples]
        return dataclasses.replace(self, audio=self.audio[:samples], pcm=pcm)


def silence(ms: float, sample_rate: int, piece: int) -> list[np.ndarray]:
    """A pause's exact zeros at the output rate, in pieces of at most `piece` samples: chunks the
    length of a patch keep the unread-audio count (inference/serving/worker.py) and every frame
    (at most 1 MiB) as they are for speech."""
    total = round(ms * sample_rate / 1000)
    return [np.zeros(min(piece, total - at), np.float32) for at in range(0, total, piece)]


def _check(ok: bool, message: str, param: str):
    if not ok:
        raise InputError(message, param)


def _check_range(name: str, value):
    problem = SETTINGS[name].check(value)
    if problem is not None:
        raise InputError(problem, name)


# A request's free-text fields, as its refusals name them to a person.
_FREE_TEXT = {"text": "text", "control": "voice description or style instruction", "prompt_text": "transcript"}


def _is_unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _is_int(value) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _is_number(value) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool) and np.isfinite(value)


def initial_noise(req: SynthesisRequest, cap: int, d: int, p: int) -> torch.Tensor:
    """[n, P, D] starting noise of each patch: the request's own, or drawn from its seed on the
    host so a seed gives the same audio on every device."""
    if req.noise is not None:
        noise = torch.from_numpy(noise_array(req.noise))
        if noise.ndim != 3 or tuple(noise.shape[1:]) != (d, p) or noise.shape[0] < 1:
            raise InputError(f"noise must have shape [steps, {d}, {p}], got {list(noise.shape)}", "noise")
        if not torch.isfinite(noise).all():
            raise InputError("noise holds NaN or infinite values", "noise")
        needed = min(req.min_len, cap)  # its rows cap the length, as max_len does
        if noise.shape[0] < needed:
            raise InputError(f"noise has {noise.shape[0]} rows (one per patch) but min_len asks for "
                             f"{needed} patches: give at least {needed} rows or lower min_len", "noise")
        return noise[:cap].transpose(1, 2).contiguous()
    return seed_noise(req.seed if req.seed is not None else secrets.randbits(63), cap, d, p)


def seed_noise(seed: int, cap: int, d: int, p: int) -> torch.Tensor:
    """[cap, P, D] noise drawn on the host from `seed`, the same on every device (torch's
    generator: it is what a seed has always meant). One PyTorch call, the draw: it runs on the
    engine's thread for every segment, so the [cap, D, P] draw is returned as a view in [cap, P,
    D] order, transposed by NumPy, and made contiguous with the others when a group is loaded."""
    gen = torch.Generator().manual_seed(seed)
    return torch.from_numpy(torch.randn(cap, d, p, generator=gen).numpy().transpose(0, 2, 1))


def noise_array(noise) -> np.ndarray:
    """A request's noise as float32 on the host, from a tensor of any dtype or device or an array."""
    try:
        if isinstance(noise, torch.Tensor):
            return noise.detach().to("cpu", torch.float32).numpy()
        return np.asarray(noise, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise InputError(f"noise must be a tensor or array of numbers [steps, feat_dim, patch_size] ({exc})",
                         "noise") from exc
