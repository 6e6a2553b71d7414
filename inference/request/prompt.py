"""The prompt sequence of each mode: one token id, one latent patch and a text/audio flag per position.

Voice design:          tokens("(desc)text") + [audio_start]
Controllable cloning:  [ref_start] + R reference patches + [ref_end] + tokens("(style)text") + [audio_start]
Ultimate cloning:      tokens(prompt_text + text) + [audio_start] + P prompt patches
                       (with a reference too, the reference prefix goes in front)
Continuing a stream:   as the request's mode, with the last segment's text after the transcript and
                      its patches after the prompt clip's (inference/request/continuation.py)
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch


_BRACKETS = re.compile(r"[()（）]")

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
    """Appends segments to the four parallel sequences, on the host in plain Python and NumPy: a
    prompt is built on the engine's thread once per segment, and each PyTorch call there lets go
    of the GIL and waits to take it back behind a busy event loop (docs/benchmarks.md)."""

    def __init__(self, patch_shape: tuple[int, int]):
        self.patch_shape = patch_shape
        self.tokens, self.text, self.audio = [], [], []
        self.blocks: list[tuple[int, np.ndarray]] = []  # (first position, patches [n, P, D]) of each audio part

    def add_text(self, ids: list[int]):
        self.tokens += ids
        self.text += [1] * len(ids)
        self.audio += [0] * len(ids)

    def add_audio(self, patches: torch.Tensor):
        n = patches.shape[0]
        self.blocks.append((len(self.tokens), (patches if patches.dtype == torch.float32 else patches.float()).numpy()))
        self.tokens += [0] * n
        self.text += [0] * n
        self.audio += [1] * n

    def build(self, target_tokens: int, warm_decoder: bool = True) -> Prompt:
        patches = np.zeros((len(self.tokens), *self.patch_shape), np.float32)  # text positions stay zero
        for at, block in self.blocks:
            patches[at: at + len(block)] = block
        audio = np.array(self.audio, np.int64)
        ends_with_audio = bool(self.audio[-1]) and warm_decoder
        context = patches[np.flatnonzero(audio)[-DECODE_CONTEXT_PATCHES:]] if ends_with_audio else patches[:0]
        tokens, text = np.array(self.tokens, np.int64), np.array(self.text, np.int64)
        return Prompt(*map(torch.from_numpy, (tokens, text, audio, patches, context)), target_tokens)


@dataclass
class Voice:
    """A request's fixed prompt parts, encoded once per request (not per segment): the reference
    clip's patches, and in ultimate cloning the prompt clip's transcript and patches."""

    reference: torch.Tensor | None  # [R, P, D]
    prompt_text: str
    prompt_patches: torch.Tensor | None  # [P, P, D]


def control_prefix(control: str | None) -> str:
    """The description or style as the model reads it, "(...)", or "" for none. Round brackets
    inside it (half and full width) are dropped first, as the official app does: "((happy))"
    would otherwise reach the model doubled and end the prefix early."""
    control = _BRACKETS.sub("", control or "").strip()  # SynthesisRequest refuses one in ultimate cloning
    return f"({control})" if control else ""


def voice_prompt(voice: Voice, text: str, tokenize: Callable[[str], list[int]], patch_shape: tuple[int, int],
                 tail: tuple[str, torch.Tensor] | None = None) -> Prompt:
    """The prompt that makes the model speak `text` in `voice`. With a tail (the text and patches
    of what this stream said last), the tail continues the voice's own prompt as the official
    `merge_prompt_cache` does: its text after the prompt transcript, its patches after the prompt
    clip's; such a prompt carries no decoder warm-up, since the stream's decoder already holds
    what precedes it."""
    b = _Builder(patch_shape)
    if voice.reference is not None:
        b.add_text([REF_AUDIO_START])
        b.add_audio(voice.reference)
        b.add_text([REF_AUDIO_END])
    spoken_before = voice.prompt_text + (tail[0] if tail else "")
    b.add_text(tokenize(spoken_before + text) + [AUDIO_START])
    for patches in (voice.prompt_patches, tail[1] if tail else None):  # the tail's right after the clip's
        if patches is not None:
            b.add_audio(patches)
    return b.build(target_tokens=len(tokenize(text)), warm_decoder=tail is None)
