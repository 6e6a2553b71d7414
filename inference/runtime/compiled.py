"""The functions a step calls, built at one place: plain, or torch.compile'd (CUDA only).

At batch 1 a step is bound by how fast its small products stream their weights, not by
arithmetic; each layer function's elementwise work is fused by torch.compile with static shapes.
Larger batch buckets get one more compile per function whose batch dimension is symbolic, instead
of one per bucket: warm-up stays short however many buckets there are. The prefill's functions get
their own compiled graphs with both the batch and the prompt length symbolic: one serves every
prefill key. `step_functions(compile=False)` gives
the plain functions; the DecodeStep holds the bundle and passes it to every model call it makes,
so both run the same code path. On Hopper GPUs with the optional kernels installed
(requirements-gpu.txt) the bundle also offers the DiT other layer functions (`dit_choices`,
inference/runtime/hopper.py); the runner times each per batch bucket at warm-up and keeps the
fastest, so a choice that measures slower on some bucket is not used there.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
from dataclasses import dataclass, field
from typing import Callable, ContextManager

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from ..model.locdit import guided_euler
from ..model.transformer import (PLAIN_OPS, LayerOps, attention_inputs, decode_attention, layer_output, rms_norm,
                                 sequence_attention)

log = logging.getLogger("voxcpm.engine")

# Four transformers, each at a static batch of 1 and a symbolic larger batch: more entries per
# function than dynamo's default limit of 8, all of them wanted.
RECOMPILE_LIMIT = 64


@dataclass(frozen=True)
class StepFunctions:
    """What the step's model calls are made of. `scope` is entered around every call that may
    compile (DecodeStep does): with compiled functions it raises dynamo's recompile limit for the
    calling thread only (dynamo's config patches are thread-local), so nothing process-wide
    changes. It is one reusable context object: each patch object owns a ContextVar, and a new
    one per call would leave an entry in the thread's context every time."""

    ops: LayerOps = PLAIN_OPS
    guided_euler: Callable = guided_euler
    scope: ContextManager = field(default_factory=contextlib.nullcontext)
    prefill: LayerOps = PLAIN_OPS  # the prompts' pass through both LMs
    # Other bundles the DiT's Euler step may run on instead of `ops`, by name: the runner times
    # each per batch bucket at warm-up (BatchRunner.choose_dit_ops) and keeps the fastest.
    dit_choices: tuple[tuple[str, LayerOps], ...] = ()

    @property
    def dit_options(self) -> dict[str, LayerOps]:
        """Every bundle the DiT may run on, by name, the step's own ("cuBLAS") first."""
        return {"cuBLAS": self.ops, **dict(self.dit_choices)}

    @property
    def compiled(self) -> bool:
        return self.ops is not PLAIN_OPS


PLAIN = StepFunctions()


def step_functions(compile: bool, hopper: bool = True) -> StepFunctions:
    """The plain functions, or compiled ones (compiled on first use, i.e. during Engine.warmup);
    with `hopper`, the Hopper kernels as the DiT's choices where they can run."""
    if not compile:
        return PLAIN
    # Guards include the device: each GPU's engine adds its own entries for the same functions.
    limit = max(torch._dynamo.config.recompile_limit, RECOMPILE_LIMIT * max(1, torch.cuda.device_count()))
    euler = batch_dynamic(torch.compile(guided_euler, fullgraph=True, dynamic=False), 0, 1, 2, 3)
    ops = compiled_ops()
    return StepFunctions(ops, euler, torch._dynamo.config.patch(recompile_limit=limit), prefill_ops(),
                         hopper_choices(ops) if hopper else ())


def hopper_choices(ops: LayerOps) -> tuple[tuple[str, LayerOps], ...]:
    """`ops` with the Hopper kernels' layer functions, without and with their RoPE, where they can run."""
    from . import hopper

    reason = hopper.unavailable()
    if reason is not None:
        log.info("Hopper kernels not used: %s", reason)
        return ()
    return (("hopper", hopper_ops(ops)), ("hopper + RoPE", hopper_ops(ops, rope=True)))


def hopper_ops(ops: LayerOps, rope: bool = False) -> LayerOps:
    """`ops` with the layer's gate/up and down products on Hopper GEMMs (hopper.py); with `rope`,
    RoPE on QuACK's rotary kernel too."""
    from . import hopper  # imports QuACK's interface on first use only

    changes = dict(layer_output=hopper.layer_output_with(static_compiled))
    if rope:
        changes["attention_inputs"] = hopper.attention_inputs_with(static_compiled)
    return dataclasses.replace(ops, **changes)


def static_compiled(fn, *batch_args: int):
    """fn compiled with static shapes, dim 0 of the given arguments symbolic past 2 (batch_dynamic)."""
    return batch_dynamic(torch.compile(fn, fullgraph=True, dynamic=False), *batch_args)


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


FLASH_FIRST = (SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH)


def compiled_ops(short_kernel: bool = True, sequence_backends=FLASH_FIRST) -> LayerOps:
    """Shapes are fixed per call site; attention is already a single kernel. LocEnc's and LocDiT's
    short sequences (5 and 11 positions) take model/short_attention.py's kernel, which fits them
    (`short_kernel=False` is the off switch); longer ones, and all of them without it, take SDPA
    pinned to `sequence_backends`: cuDNN's kernel adds a memset per layer, and on an H200 the flash
    kernel made a DiT call 6% faster (docs/benchmarks.md). SDPA takes the first allowed backend that
    the GPU supports."""
    static = dict(fullgraph=True, dynamic=False)
    attend = pinned_attention(sequence_backends)
    if short_kernel:
        from ..model.short_attention import short_attention  # imports Triton, which a CPU-only install may lack
        attend = functools.partial(short_attention, fallback=attend)
    return LayerOps(batch_dynamic(torch.compile(attention_inputs, **static), 0, 3, 4),
                    batch_dynamic(torch.compile(layer_output, **static), 0, 1),
                    decode_attention,
                    batch_dynamic(torch.compile(rms_norm, **static), 0),
                    attend)


def pinned_attention(backends):
    """Whole-sequence attention restricted to `backends` (None: let SDPA choose among all)."""
    if backends is None:
        return sequence_attention

    def attend(q, k, v, causal: bool):
        with sdpa_kernel(list(backends)):
            return sequence_attention(q, k, v, causal)
    return attend


def prefill_ops(backends=FLASH_FIRST) -> LayerOps:
    """The prefill's functions compiled once for every batch and prompt length (both symbolic).
    Run plain, a 64 x 64 prefill spent about a third of its time in unfused elementwise kernels
    (norms and RoPE in float32, SiLU, residuals: about 1.3 GB of memory traffic per layer). They
    are wrappers with their own code objects, because dynamo keeps its compiled graphs per code
    object: the step's DiT calls (static lengths) must not land in these symbolic-length graphs."""
    static = dict(fullgraph=True, dynamic=False)
    return LayerOps(sequence_dynamic(torch.compile(prefill_attention_inputs, **static), {0: (0, 1), 3: (0,), 4: (0,)}),
                    sequence_dynamic(torch.compile(prefill_layer_output, **static), {0: (0, 1), 1: (0, 2)}),
                    decode_attention,
                    sequence_dynamic(torch.compile(prefill_norm, **static), {0: (0, 1)}),
                    pinned_attention(backends))


def sequence_dynamic(fn, marks: dict[int, tuple[int, ...]]):
    """Marks the given dims of the given tensor arguments symbolic (those of size 1 stay static:
    dynamo specializes them)."""
    @functools.wraps(fn)
    def call(*args):
        for i, dims in marks.items():
            if isinstance(args[i], torch.Tensor):
                for dim in dims:
                    torch._dynamo.maybe_mark_dynamic(args[i], dim)
        return fn(*args)
    return call


def prefill_attention_inputs(x, norm_weight, qkv_weight, cos, sin, eps: float, heads: tuple[int, int, int]):
    return attention_inputs(x, norm_weight, qkv_weight, cos, sin, eps, heads)


def prefill_layer_output(x, attn, o_weight, norm_weight, gate_up_weight, down_weight, eps: float,
                         residual_scale: float):
    return layer_output(x, attn, o_weight, norm_weight, gate_up_weight, down_weight, eps, residual_scale)


def prefill_norm(x, weight, eps: float):
    return rms_norm(x, weight, eps)
