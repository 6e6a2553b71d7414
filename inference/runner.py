"""The eager decode loop: prefill, then one patch per step until the stop head fires.

It is the reference the CUDA-graph runner is tested against, and the path used on CPU.
"""
from __future__ import annotations

from typing import Iterator

import numpy as np
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from .audio_vae import AudioVAE
from .model import VoxCPM2
from .prompt import Prompt
from .locdit import guided_euler
from .transformer import LayerOps, attention_inputs, decode_attention, layer_output, rms_norm, sequence_attention


def span_buckets(capacity: int, smallest: int = 256) -> list[int]:
    """Attention spans: powers of two from `smallest`, then the whole cache."""
    spans, span = [], smallest
    while span < capacity:
        spans.append(span)
        span *= 2
    return spans + [capacity]


def compile_step_functions(model: VoxCPM2):
    """Per-layer functions fused by torch.compile: at batch 1 a step is bound by its kernel count,
    not by arithmetic. Compiled on first use, i.e. during Engine.warmup."""
    ops = compiled_ops()
    for transformer in model.transformers():
        transformer.ops = ops
    model.dit.guided_euler = torch.compile(guided_euler, fullgraph=True, dynamic=False)


def compiled_ops(sequence_backends=(SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION,
                                     SDPBackend.MATH)) -> LayerOps:
    """Shapes are fixed per call site; attention is already a single SDPA kernel. LocEnc's and
    LocDiT's short sequences skip cuDNN's kernel, which adds a memset per layer: on an H200 the
    flash kernel made a DiT call 6% faster (bench/RESULTS.md). SDPA takes the first allowed
    backend that the GPU supports."""
    static = dict(fullgraph=True, dynamic=False)
    return LayerOps(torch.compile(attention_inputs, **static), torch.compile(layer_output, **static),
                    decode_attention, torch.compile(rms_norm, **static), pinned_attention(sequence_backends))


def pinned_attention(backends):
    """Whole-sequence attention restricted to `backends` (None: let SDPA choose among all)."""
    if backends is None:
        return sequence_attention

    def attend(q, k, v, causal: bool):
        with sdpa_kernel(list(backends)):
            return sequence_attention(q, k, v, causal)
    return attend


class EagerRunner:
    def __init__(self, model: VoxCPM2, vae: AudioVAE, compile_ops: bool = False):
        self.model, self.vae = model, vae
        if compile_ops:
            compile_step_functions(model)
        # Both runners attend over the same bucketed spans, so they run the same kernels and the
        # graph path can be checked bit for bit against this one.
        self.buckets = span_buckets(model.base_cache.capacity)
        self.device = next(model.parameters()).device
        self.dtype = next(model.parameters()).dtype
        self.vae_dtype = next(vae.parameters()).dtype
        self._time_tokens: dict[int, list] = {}

    def time_tokens(self, steps: int) -> list:
        if steps not in self._time_tokens:
            self._time_tokens[steps] = self.model.time_tokens(steps, self.device)
        return self._time_tokens[steps]

    def span(self, position: int) -> int:
        return next(s for s in self.buckets if s > position)

    def prefill(self, prompt: Prompt):
        to = dict(device=self.device)
        return self.model.prefill(
            prompt.tokens.unsqueeze(0).to(**to), prompt.text_mask.unsqueeze(0).to(**to),
            prompt.audio_mask.unsqueeze(0).to(**to), prompt.patches.unsqueeze(0).to(**to, dtype=self.dtype),
        )

    def start_decoder(self, prompt: Prompt):
        """A fresh VAE decoder state, warmed on the prompt's last patches in continuation mode."""
        state = self.vae.new_decoder_state(batch=1, device=self.device, dtype=self.vae_dtype)
        if len(prompt.decode_context):
            context = prompt.decode_context.to(self.device, self.dtype).to(self.vae_dtype)
            self.vae.decode_chunk(patches_to_frames(context.unsqueeze(0)), state)
        return state

    @torch.inference_mode()
    def run(self, prompt: Prompt, noise: torch.Tensor, cfg_value: float, steps: int,
            min_len: int, max_patches: int) -> Iterator[tuple[np.ndarray, np.ndarray, bool]]:
        """Yields (new audio, latent patch [D, P], stop flag) per generated patch. noise [n, P, D]."""
        state = self.prefill(prompt)
        decoder = self.start_decoder(prompt)
        time_tokens = self.time_tokens(steps)
        # A tensor, not a Python float, so that bf16 rounding matches the graph runner's.
        cfg_value = torch.tensor(cfg_value, dtype=torch.float32, device=self.device)
        position = torch.tensor([len(prompt)], device=self.device)
        for i in range(max_patches):
            patch = self.model.sample_patch(state, noise[i : i + 1].to(self.device, self.dtype), cfg_value, time_tokens)
            stop = self.model.stop_logits(state.lm_hidden).argmax(-1)
            audio = self.vae.decode_chunk(patches_to_frames(patch.unsqueeze(1).to(self.vae_dtype)), decoder)
            # Deliberate sync: the eager path hands each patch's audio and stop flag to the host.
            stop = bool(stop[0] == 1)
            yield audio[0].float().cpu().numpy(), patch[0].T.float().cpu().numpy(), stop
            if i > min_len and stop:
                return
            if i + 1 < max_patches:
                state = self.model.advance(patch, position, self.span(len(prompt) + i))
                position += 1


def patches_to_frames(patches: torch.Tensor) -> torch.Tensor:
    """[B, T, P, D] patches -> [B, D, T*P] latent frames, the VAE's layout."""
    b, t, p, d = patches.shape
    return patches.reshape(b, t * p, d).transpose(1, 2)
