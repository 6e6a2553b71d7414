"""The prompt sequence of each mode: one token id, one latent patch and a text/audio flag per position.

Voice design:          tokens("(desc)text") + [audio_start]
Controllable cloning:  [ref_start] + R reference patches + [ref_end] + tokens("(style)text") + [audio_start]
Ultimate cloning:      tokens(prompt_text + text) + [audio_start] + P prompt patches
                       (with a reference too, the reference prefix goes in front)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from .errors import InputError
from .request import SynthesisRequest
from .text import normalize_text

AUDIO_START, REF_AUDIO_START, REF_AUDIO_END = 101, 103, 104
# The official offline decode starts this many prompt patches early and cuts their audio; the
# streaming decoder is warmed on the same patches so stream and offline decode agree.
DECODE_CONTEXT_PATCHES = 3


@dataclass
class Prompt:
    tokens: torch.Tensor  # [T] long
    text_mask: torch.Tensor  # [T] 0/1
    audio_mask: torch.Tensor  # [T] 0/1
    patches: torch.Tensor  # [T, P, D] float32
    decode_context: torch.Tensor  # [C, P, D] patches to warm the VAE decoder on (continuation only)
    target_tokens: int  # tokens of the text to speak: bounds the length like the official cap

    def __len__(self) -> int:
        return self.tokens.shape[0]


class _Builder:
    """Appends segments to the four parallel sequences."""

    def __init__(self, patch_shape: tuple[int, int]):
        self.patch_shape = patch_shape
        self.tokens, self.text, self.audio, self.patches = [], [], [], []

    def add_text(self, ids: list[int]):
        self.tokens += ids
        self.text += [1] * len(ids)
        self.audio += [0] * len(ids)
        self.patches.append(torch.zeros(len(ids), *self.patch_shape))

    def add_audio(self, patches: torch.Tensor):
        n = patches.shape[0]
        self.tokens += [0] * n
        self.text += [0] * n
        self.audio += [1] * n
        self.patches.append(patches.float())

    def build(self, target_tokens: int) -> Prompt:
        patches = torch.cat(self.patches)
        audio = torch.tensor(self.audio)
        ends_with_audio = bool(self.audio[-1])
        context = patches[audio.nonzero().squeeze(1)][-DECODE_CONTEXT_PATCHES:] if ends_with_audio else patches[:0]
        return Prompt(torch.tensor(self.tokens), torch.tensor(self.text), audio, patches, context, target_tokens)


def speech_text(req: SynthesisRequest) -> str:
    """The text the model reads: a control as a parenthesised prefix, then whitespace normalized
    over the whole string, as the official wrapper does."""
    control = (req.control or "").strip()  # SynthesisRequest refuses one in ultimate cloning
    return normalize_text(f"({control}){req.text}" if control else req.text)


def check_mode(req: SynthesisRequest):
    has_clip, has_transcript = req.prompt_audio is not None, bool((req.prompt_text or "").strip())
    if has_clip and not has_transcript:
        raise InputError("ultimate cloning needs the exact transcript of the clip: give prompt_text")
    if has_transcript and not has_clip:
        raise InputError("ultimate cloning needs the clip as well as its transcript: give prompt_audio")


def build_prompt(req: SynthesisRequest, tokenize: Callable[[str], list[int]],
                 encode_audio: Callable[[object, str, str], torch.Tensor], patch_shape: tuple[int, int]) -> Prompt:
    """encode_audio(source, pad_side, label) -> [n, P, D] patches of that clip."""
    check_mode(req)
    text = speech_text(req)
    b = _Builder(patch_shape)
    if req.reference_audio is not None:
        b.add_text([REF_AUDIO_START])
        b.add_audio(encode_audio(req.reference_audio, "right", "reference audio"))
        b.add_text([REF_AUDIO_END])
    if req.prompt_audio is not None:
        b.add_text(tokenize(req.prompt_text + text) + [AUDIO_START])
        b.add_audio(encode_audio(req.prompt_audio, "left", "prompt audio"))
    else:
        b.add_text(tokenize(text) + [AUDIO_START])
    return b.build(target_tokens=len(tokenize(text)))
