"""The streaming decoder's layers as GPU-friendly tensor arithmetic (`Decoder.stream`).

The same operations as the reference convolutions in audio_vae.py, rewritten so that one chunk of
many rows runs at memory bandwidth once torch.compile (inductor) fuses it on CUDA; eagerly (the CPU,
the tests) they are plain PyTorch and give the reference's numbers to float32 rounding.

- Layout: activations are channels-last, [rows, time, channels]. Every convolution that mixes
  channels is then one GEMM over all rows and frames at once ([rows * time, Cin] x [Cin, N]): a
  large tensor-core problem instead of a batch of skinny ones. Per-channel parameters (Snake's
  alpha, biases, the sample-rate condition) broadcast along the contiguous axis, and a shift in
  time is a whole-row offset, so shifted reads stay coalesced.
- Transposed convolution (kernel 2 x stride): each input frame feeds exactly two output frames.
  One GEMM against the weight in its stored layout [Cin, Cout * 2s] (no copy), then an
  overlap-add: output frame j = first half of frame j's product + second half of frame j-1's.
  cuDNN ran it as the backward-data kernel of a convolution, float32 and off the tensor cores.
- Depthwise dilated convolution: per channel, y[t] = b + sum_k w[k] x[t - (K-1-k) d]: seven
  shifted, scaled copies of the input. As a pointwise expression inductor fuses it with the Snake
  in front of it, the Snake after it and the residual add, in one kernel whose shifted reads of
  the same input hit the cache (or, where its heuristics prefer, one more kernel writes the
  Snake's output once). At 14 FLOP per output, PyTorch's generic depthwise kernel was bound by
  its own untiled reads.
- Other convolutions (the last one, 32 channels to 1; all of them in a non-depthwise config): one
  GEMM gives every tap's contribution [time, K * Cout], then the same shifted sum.
- Streaming state: a convolution's left context (the last (K-1) d inputs it saw, or one frame for
  the transposed one) is part of a `DecoderState` row, as [context, channels]. A chunk gathers
  its rows' states once (`ChunkContext`), each convolution's input is that context followed by
  the new frames (a concatenation that inductor computes inside the kernel producing the input,
  not as a copy of its own), and the tails of those, the next contexts, go back into the same
  state tensor with one `index_copy_`. The rows come as an index tensor and the state tensor is
  allocated once, so every batch bucket, and a single row anywhere, is the same compiled graph,
  and a CUDA graph replays on the same memory.
- Precision: GEMMs accumulate in float32; on CUDA their inputs are rounded to TF32 exactly when
  cuDNN may do so for the convolutions they replace (`torch.backends.cudnn.allow_tf32`, on by
  default), see `conv_precision`. The depthwise sums are plain float32. The CUDA kernel path
  (vae_kernel_stream.py) splits its products (`tf32_split`) to keep float32's accuracy on TF32
  tensor cores.
"""
from __future__ import annotations

import contextlib
import functools
import itertools
import threading

import torch
import torch.nn.functional as F
from torch import Tensor


def snake(x: Tensor, alpha: Tensor) -> Tensor:
    # Same operation order as the official kernel: the 1e-9 and the reciprocal change the rounding.
    return x + (alpha + 1e-9).reciprocal() * torch.sin(alpha * x).pow(2)


def slot_offsets(shapes: list[tuple[int, int]]) -> list[int]:
    """Where each stateful convolution's context starts in a state row, then the row's length."""
    return [0, *itertools.accumulate(channels * context for channels, context in shapes)]


def contexts(flat: Tensor, shapes: list[tuple[int, int]]) -> list[Tensor]:
    """Each stateful convolution's context, a [rows, context, channels] view of flat [rows, N]."""
    offsets = slot_offsets(shapes)
    return [flat[:, start:end].unflatten(1, (context, channels))
            for (channels, context), start, end in zip(shapes, offsets, offsets[1:])]


def with_context(past: Tensor, x: Tensor, time: int) -> tuple[Tensor, Tensor]:
    """A convolution's inputs preceded by its context, and the context's next value: the last
    frames of that (concatenating first makes chunks shorter than the context work unbranched)."""
    full = torch.cat([past, x], dim=time)
    context = past.shape[time]
    return full, full.narrow(time, full.shape[time] - context, context)


class DecoderState:
    """The streaming context of a set of rows (one stream each): a tensor per stateful decoder
    convolution, [rows, context frames, channels], all views of one flat [rows, N] tensor.

    `root` is allocated once and only ever updated in place, so a CUDA graph that captured
    `decode_chunk` keeps reading and writing the same memory on every replay. `rows(b)` is the
    state of rows 0..b-1 (for a batch bucket), `row(i)` one stream's, both views of the same root;
    `reset(rows)` clears streams' contexts with a single kernel.
    """

    def __init__(self, root: Tensor, shapes: list[tuple[int, int]], start: int = 0, count: int | None = None):
        self.root, self.shapes, self.start = root, shapes, start
        self.count = root.shape[0] - start if count is None else count
        self.flat = root[start: start + self.count]
        self.buffers = contexts(self.flat, shapes)

    def rows(self, count: int) -> "DecoderState":
        return DecoderState(self.root, self.shapes, self.start, count)

    def row(self, index: int) -> "DecoderState":
        return DecoderState(self.root, self.shapes, self.start + index, 1)

    def row_ids(self) -> Tensor:
        """The rows' indices into `root`, as `Decoder.stream` takes them."""
        return torch.arange(self.start, self.start + self.count, device=self.root.device)

    def reset(self, rows: int | Tensor | None = None) -> None:
        """Back to silence (the causal zero padding), with one kernel: one row, the rows of a
        [k] long tensor (on the device), or all of them."""
        if isinstance(rows, Tensor):
            self.flat.index_fill_(0, rows, 0)
        else:
            (self.flat if rows is None else self.flat[rows]).zero_()

    def extend(self, slot: int, x: Tensor) -> Tensor:
        """For the reference layers: [rows, C, T] -> [rows, C, context + T], the context updated in place."""
        past = self.buffers[slot].transpose(1, 2)
        full, following = with_context(past, x, 2)
        past.copy_(following)
        return full

    @property
    def numel(self) -> int:
        return self.flat.numel()


class ChunkContext:
    """The state as `Decoder.stream` sees it during one chunk: each convolution's context read
    from a [rows, N] snapshot, its next value kept aside; `updated()` is the whole next state, for
    one write back (in place) at the end of the chunk."""

    def __init__(self, flat: Tensor, shapes: list[tuple[int, int]]):
        self.past = contexts(flat, shapes)
        self.next: list[Tensor | None] = [None] * len(shapes)

    def extend(self, slot: int, x: Tensor) -> Tensor:
        """[rows, T, C] -> [rows, context + T, C]."""
        full, self.next[slot] = with_context(self.past[slot], x, 1)
        return full

    def updated(self) -> Tensor:
        return torch.cat([following.flatten(1) for following in self.next], dim=1)


def depthwise(full: Tensor, weight: Tensor, bias: Tensor, dilation: int) -> Tensor:
    """Depthwise causal convolution of [rows, context + T, C] (context = (K-1) dilation) with
    weight [C, 1, K]: the shifted sum, [rows, T, C]."""
    taps = weight.shape[-1]
    frames = full.shape[1] - (taps - 1) * dilation
    w = weight[:, 0, :]
    y = bias + w[:, 0] * full[:, :frames]
    for k in range(1, taps):
        y = y + w[:, k] * full[:, k * dilation: k * dilation + frames]
    return y


def dense(full: Tensor, weight: Tensor, bias: Tensor, dilation: int) -> Tensor:
    """Causal convolution of [rows, context + T, Cin] with weight [Cout, Cin, K]: one GEMM for
    every tap's contribution, then their shifted sum, [rows, T, Cout]."""
    cout, cin, taps = weight.shape
    if taps == 1:
        return F.linear(full, weight[:, :, 0], bias)
    rows, length, _ = full.shape
    frames = length - (taps - 1) * dilation
    # [K * Cout, Cin]: a view when Cout is 1 (the last layer), a small copy otherwise.
    per_tap = F.linear(full, weight.permute(2, 0, 1).reshape(taps * cout, cin)).view(rows, length, taps, cout)
    y = bias + per_tap[:, :frames, 0]
    for k in range(1, taps):
        y = y + per_tap[:, k * dilation: k * dilation + frames, k]
    return y


def per_frame_products(full: Tensor, weight: Tensor, mm=None) -> Tensor:
    """Every input frame of full [rows, length, Cin] against a transposed convolution's weight in
    its stored layout [Cin, Cout, K] (no copy): [rows * length, Cout * K], one GEMM, or
    mm(frames, weight, view) with the weight's 2-D view (vae_kernel_stream.Products.mm)."""
    cin, cout, kernel = weight.shape
    frames, view = full.reshape(-1, cin), lambda w: w.reshape(cin, cout * kernel)
    return frames @ view(weight) if mm is None else mm(frames, weight, view)


def tf32_split(t: Tensor) -> tuple[Tensor, Tensor]:
    """t = hi + lo exactly: hi is t rounded to TF32's 10 mantissa bits, lo the remainder. A tensor
    core rounds its inputs to TF32 (2^-11 relative); hi @ w_hi + hi @ w_lo + lo @ w_hi leaves out
    only lo @ w_lo and lo's own rounding, about 2^-22: a float32 product's accuracy at three
    times the TF32 work (the "3xTF32" of CUTLASS; Triton's tl.dot calls it tf32x3)."""
    hi = ((t.view(torch.int32) + 0x1000) & -0x2000).view(torch.float32)  # round half up in magnitude
    return hi, t - hi


def upsample(full: Tensor, weight: Tensor, bias: Tensor, stride: int) -> Tensor:
    """Causal transposed convolution, kernel 2 x stride, of [rows, 1 + T, Cin] (the previous
    chunk's last frame first) with weight [Cin, Cout, 2 stride]: [rows, T * stride, Cout]."""
    rows, length, _ = full.shape
    cout, kernel = weight.shape[1:]
    frames = per_frame_products(full, weight).view(rows, length, cout, kernel)
    # Output frame j: the first half of input j's product plus the second half of input j-1's.
    out = frames[:, 1:, :, :stride] + frames[:, :-1, :, stride:] + bias.unsqueeze(-1)
    return out.transpose(2, 3).reshape(rows, (length - 1) * stride, cout)


# The TF32 flag is one for the whole process: engines of several GPUs decode on threads of their own,
# and interleaved flips would leave it as one thread's "before" found it (TF32 on for every later
# float32 matmul, or off for a decode being compiled). Held for the decode call only; a CUDA graph's
# replay does not enter it.
_PRECISION = threading.Lock()


@contextlib.contextmanager
def conv_precision():
    """cuBLAS takes the TF32 policy that cuDNN has for the convolutions the GEMMs replace."""
    with _PRECISION:
        before = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32
        try:
            yield
        finally:
            torch.backends.cuda.matmul.allow_tf32 = before


@functools.cache
def compiled(fn):
    """torch.compile(fn), once per process: a second wrapper would trace and compile again. Sizes
    are symbolic, so one graph serves every batch bucket and chunk length (batches of one apart)."""
    return torch.compile(fn, fullgraph=True, dynamic=True)
