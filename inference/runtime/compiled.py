"""torch.compile'd versions of the small functions a step is made of (CUDA only).

At batch 1 a step is bound by its kernel count, not by arithmetic, so each layer function is
fused by torch.compile with static shapes. Larger batch buckets get one more compile per function
whose batch dimension is symbolic, instead of one per bucket: warm-up stays short however many
buckets there are.
"""
from __future__ import annotations

import functools

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from ..model.audio_vae import AudioVAE
from ..model.locdit import guided_euler
from ..model.voxcpm2 import VoxCPM2
from ..model.transformer import LayerOps, attention_inputs, decode_attention, layer_output, rms_norm, sequence_attention

# Four transformers, each at a static batch of 1 and a symbolic larger batch: more entries per
# function than dynamo's default limit of 8, all of them wanted.
RECOMPILE_LIMIT = 64


def compile_step_functions(model: VoxCPM2, vae: AudioVAE):
    """Compiled on first use, i.e. during Engine.warmup."""
    # Guards include the device: each GPU's engine adds its own entries for the same functions.
    limit = RECOMPILE_LIMIT * max(1, torch.cuda.device_count())
    torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, limit)
    ops = compiled_ops()
    for transformer in model.transformers():
        transformer.ops = ops
    model.dit.guided_euler = batch_dynamic(torch.compile(guided_euler, fullgraph=True, dynamic=False), 0, 1, 2, 3)
    vae.decoder.compile_stream()


def batch_dynamic(fn, *batch_args: int):
    """Marks dim 0 of the given tensor arguments symbolic when it is over 2, so one compiled graph
    serves every larger bucket; batches of 1 and 2 (one stream: the DiT runs its two guidance
    branches as a batch of 2) keep fully static graphs. RoPE tables of a sequence ([T, D], not
    per row) are left alone."""
    @functools.wraps(fn)
    def call(*args):
        if args[0].shape[0] > 2:
            for i in batch_args:
                arg = args[i]
                if isinstance(arg, torch.Tensor) and arg.ndim >= 3:
                    torch._dynamo.maybe_mark_dynamic(arg, 0)
        return fn(*args)
    return call


def compiled_ops(sequence_backends=(SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION,
                                     SDPBackend.MATH)) -> LayerOps:
    """Shapes are fixed per call site; attention is already a single SDPA kernel. LocEnc's and
    LocDiT's short sequences skip cuDNN's kernel, which adds a memset per layer: on an H200 the
    flash kernel made a DiT call 6% faster (bench/RESULTS.md). SDPA takes the first allowed
    backend that the GPU supports."""
    static = dict(fullgraph=True, dynamic=False)
    return LayerOps(batch_dynamic(torch.compile(attention_inputs, **static), 0, 3, 4),
                    batch_dynamic(torch.compile(layer_output, **static), 0, 1),
                    decode_attention,
                    batch_dynamic(torch.compile(rms_norm, **static), 0),
                    pinned_attention(sequence_backends))


def pinned_attention(backends):
    """Whole-sequence attention restricted to `backends` (None: let SDPA choose among all)."""
    if backends is None:
        return sequence_attention

    def attend(q, k, v, causal: bool):
        with sdpa_kernel(list(backends)):
            return sequence_attention(q, k, v, causal)
    return attend
