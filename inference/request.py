"""What one synthesis asks for, and what each streamed step gives back."""
from __future__ import annotations

import secrets
import unicodedata
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from .errors import InputError

MAX_SEED = 2**63 - 1
MAX_PATCHES = 2**16  # about 2.9 hours of audio: far above any cache, so only nonsense is refused


@dataclass
class SynthesisRequest:
    text: str
    control: str | None = None
    reference_audio: Any = None  # a path, (sample_rate, numpy array) as Gradio gives it, or a ReferenceClip
    prompt_audio: Any = None
    prompt_text: str | None = None
    cfg_value: float = 2.0
    inference_timesteps: int = 10
    min_len: int = 2
    max_len: int = 4096
    seed: int | None = None
    # Optional tensor or array [steps, feat_dim, patch_size]: patch i starts from noise[i], so the
    # rows also cap the length, as max_len does (and must number at least min_len).
    noise: Any = None

    def __post_init__(self):
        _check(isinstance(self.text, str) and has_content(self.text),
               "text is empty: it holds no letters, digits, punctuation or symbols (only spaces, control, "
               "zero-width, combining or direction marks): give the words to speak")
        _check(self.control is None or isinstance(self.control, str), "control must be text or None")
        _check(self.prompt_text is None or isinstance(self.prompt_text, str), "prompt_text must be text or None")
        _check(_is_number(self.cfg_value) and 0.0 <= float(self.cfg_value) <= 10.0,
               f"cfg_value {self.cfg_value!r} is out of range: use a number from 0 to 10")
        _check(_is_int(self.inference_timesteps) and 1 <= self.inference_timesteps <= 100,
               f"inference_timesteps {self.inference_timesteps!r} is out of range: use a whole number from 1 to 100")
        _check(_is_int(self.min_len) and 0 <= self.min_len <= MAX_PATCHES,
               f"min_len {self.min_len!r} is out of range: use a whole number of patches from 0 to {MAX_PATCHES}")
        _check(_is_int(self.max_len) and 1 <= self.max_len <= MAX_PATCHES,
               f"max_len {self.max_len!r} is out of range: use a whole number of patches from 1 to {MAX_PATCHES}")
        _check(self.min_len <= self.max_len, f"min_len ({self.min_len}) must not exceed max_len ({self.max_len})")
        _check(self.seed is None or (_is_int(self.seed) and 0 <= self.seed <= MAX_SEED),
               f"seed {self.seed!r} is out of range: use a whole number from 0 to {MAX_SEED}, or none")
        _check(not (self.control or "").strip() or self.mode != "ultimate",
               "a style instruction cannot be used in ultimate cloning: the model would read it aloud. "
               "Leave it empty, or use controllable cloning (reference clip + style instruction).")

    @property
    def mode(self) -> str:
        if self.prompt_audio is not None or (self.prompt_text or "").strip():
            return "ultimate"
        return "cloning" if self.reference_audio is not None else "design"


@dataclass
class AudioChunk:
    audio: np.ndarray  # float32, mono, only the samples this patch adds
    latents: np.ndarray  # float32 [feat_dim, patch_size]: the patch the audio was decoded from
    index: int  # 0 for the first generated patch


# Unicode categories that say nothing on their own: separators (Z*), controls, format characters
# such as zero-width spaces and bidi marks, surrogates, private use, unassigned (C*), and combining
# marks (M*), which only modify a letter. Text made only of these is as empty as whitespace.
_SILENT_CATEGORIES = ("Z", "C", "M")


def has_content(text: str) -> bool:
    """True when the text holds at least one letter, digit, punctuation mark or symbol."""
    return any(unicodedata.category(ch)[0] not in _SILENT_CATEGORIES for ch in text)


def _check(ok: bool, message: str):
    if not ok:
        raise InputError(message)


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
            raise InputError(f"noise must have shape [steps, {d}, {p}], got {list(noise.shape)}")
        if not torch.isfinite(noise).all():
            raise InputError("noise holds NaN or infinite values")
        needed = min(req.min_len, cap)  # its rows cap the length, as max_len does
        if noise.shape[0] < needed:
            raise InputError(f"noise has {noise.shape[0]} rows (one per patch) but min_len asks for "
                             f"{needed} patches: give at least {needed} rows or lower min_len")
        return noise[:cap].transpose(1, 2).contiguous()
    seed = req.seed if req.seed is not None else secrets.randbits(63)
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(cap, d, p, generator=gen).transpose(1, 2).contiguous()


def noise_array(noise) -> np.ndarray:
    """A request's noise as float32 on the host, from a tensor of any dtype or device or an array."""
    try:
        if isinstance(noise, torch.Tensor):
            return noise.detach().to("cpu", torch.float32).numpy()
        return np.asarray(noise, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise InputError(f"noise must be a tensor or array of numbers [steps, feat_dim, patch_size] ({exc})") from exc
