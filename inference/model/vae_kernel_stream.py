"""`Decoder.stream` through the Triton kernels of vae_kernels.py: the CUDA decode of one chunk.

The same layers in the same order as `Decoder.stream` (vae_stream.py's formulation, which stays
the reference and the CPU path); what changes is where the work happens:
- each stateful convolution's input is built once, by `snake_context`, straight from the state
  root through the row index (no gathered copy of every row's state), and its next context is one
  `index_copy_` of that input's last frames back into the root, after the input is built;
- a residual unit's 1x1 convolution is `torch.addmm(x, h, W^T)`: cuBLAS adds the residual in its
  epilogue, and the bias it leaves out travels as a pending shift that the next kernel reading x
  adds (`shifts`, at most three: one block's units);
- the transposed convolution is one GEMM of every input frame against the weight in its stored
  layout, then `overlap_add`;
- the head and the first `split_blocks` blocks split every product into three TF32 products
  (vae_stream.tf32_split, tl.dot's tf32x3), float32's accuracy: an error made early is carried
  through every later layer, and cuDNN runs the reference's first transposed convolution in plain
  float32 (docs/benchmarks.md, "The VAE decode", has what each choice costs and its SNR).
Only the depthwise decoder (the published one: `VAEConfig.depthwise`) has this path.
"""
from __future__ import annotations

import weakref

import torch
import triton
from torch import Tensor

from . import vae_kernels as K
from .vae_stream import per_frame_products, slot_offsets, tf32_split

# Residual units this wide or narrower run as one kernel (residual_kernel). At 128 channels the
# kernel took 0.173 ms at 64 rows where depthwise kernel + cuBLAS take less (docs/benchmarks.md).
FUSED_CHANNELS = 64


class Products:
    """The decode's channel-mixing products: TF32 where cuDNN would use it (conv_precision), split
    into three TF32 products when `precise`. Owns the weights' splits, made on a weight's first
    use (the engine's warm-up, before graphs are captured). Like the captured graphs, they are
    made from the weights as loaded: nothing changes VAE weights afterwards (LoRA adapts the
    language model and the DiT); a decoder given new weights is compiled again (compile_stream),
    which starts without splits."""

    def __init__(self, precise: bool):
        self.precise = precise
        self.halves = {}  # id(weight) -> (a weak reference to it, hi, lo)

    def split(self, dtype: torch.dtype) -> bool:
        """Only float32 operands are split (a bfloat16 or float16 decode's products are exact as they are)."""
        return self.precise and dtype == torch.float32 and torch.backends.cuda.matmul.allow_tf32

    def dot_precision(self, dtype: torch.dtype) -> str:
        """tl.dot's input precision for the same policy."""
        return "tf32x3" if self.split(dtype) else "tf32" if torch.backends.cuda.matmul.allow_tf32 else "ieee"

    def weight_halves(self, weight: Tensor) -> tuple[Tensor, Tensor]:
        known = self.halves.get(id(weight))
        if known is None or known[0]() is not weight:  # new, or another tensor at a freed one's id
            known = (weakref.ref(weight), *tf32_split(weight.detach()))
            self.halves[id(weight)] = known
        return known[1], known[2]

    def mm(self, a: Tensor, weight: Tensor, view, out: Tensor | None = None) -> Tensor:
        """out + a @ view(weight), in place (out None: a new tensor). view: the weight's 2-D view."""
        if not self.split(a.dtype):
            return a @ view(weight) if out is None else out.addmm_(a, view(weight))
        (a_hi, a_lo), (w_hi, w_lo) = tf32_split(a), map(view, self.weight_halves(weight))
        if w_hi.numel() > a.numel():  # few frames, a big weight (the first transposed convolution):
            return self._stacked(a_hi, a_lo, w_hi, w_lo, out)  # reading the weight is the cost
        out = a_lo @ w_hi if out is None else out.addmm_(a_lo, w_hi)  # the small terms first
        return out.addmm_(a_hi, w_lo).addmm_(a_hi, w_hi)

    @staticmethod
    def _stacked(a_hi: Tensor, a_lo: Tensor, w_hi: Tensor, w_lo: Tensor, out: Tensor | None) -> Tensor:
        """The same three terms in the same order, w_hi read once for both of its products: two
        weight reads instead of three (at 64 rows the first block's weight, 134 MB, is read in
        0.11 ms, its product's whole time)."""
        lo_hi, hi_hi = (torch.cat([a_lo, a_hi]) @ w_hi).chunk(2)
        out = lo_hi if out is None else out.add_(lo_hi)
        return out.addmm_(a_hi, w_lo).add_(hi_hi)


class KernelChunk:
    """One chunk's view of the state: the root [all rows, N], the chunk's row indices and each
    slot's offset into a row. Builds convolution inputs and writes their next contexts back."""

    def __init__(self, root: Tensor, rows: Tensor, shapes: list[tuple[int, int]]):
        self.root, self.rows, self.shapes = root, rows, shapes
        self.offsets = slot_offsets(shapes)

    def input(self, x: Tensor, slot: int, shifts: list[Tensor] = (), cond=None, alpha: Tensor | None = None) -> Tensor:
        """full [rows, context + T, C]: the slot's context, then snake(cond(x + sum(shifts)))."""
        rows, frames, channels = x.shape
        context = self.shapes[slot][1]
        full = torch.empty(rows, context + frames, channels, device=x.device, dtype=x.dtype)
        pending = list(shifts) + [x] * (3 - len(shifts))  # unused pointers: any tensor
        scale, bias = (x, x) if cond is None else cond.weights()
        K.snake_context_kernel[K.grid(context + frames, channels, rows)](
            x, full, self.root, self.rows, self.offsets[slot], self.root.stride(0), *pending, scale, bias,
            x if alpha is None else alpha, frames, channels, K.row_class(rows), CTX=context, SHIFTS=len(shifts),
            AFFINE=cond is not None, SNAKE=alpha is not None)
        # After the kernel has read the old context (same stream): the new one is full's tail.
        self.root[:, self.offsets[slot]: self.offsets[slot + 1]].index_copy_(0, self.rows, full[:, frames:].flatten(1))
        return full


def depthwise(full: Tensor, conv, alpha: Tensor | None) -> Tensor:
    """conv (depthwise, kernel K, dilation d) of full [rows, (K-1) d + T, C], then snake(alpha)."""
    rows, length, channels = full.shape
    frames = length - conv.left_pad
    out = torch.empty(rows, frames, channels, device=full.device, dtype=full.dtype)
    K.depthwise_kernel[K.grid(frames, channels, rows)](
        full, conv.weight, conv.bias, full if alpha is None else alpha, out, frames, channels, K.row_class(rows),
        CTX=conv.left_pad, K=conv.kernel_size[0], DILATION=conv.dilation[0], SNAKE=alpha is not None)
    return out


def upsample(full: Tensor, conv, products: Products) -> Tensor:
    """The transposed convolution of full [rows, 1 + T, Cin] (context frame first): [rows, T s, Cout]."""
    rows, length, _ = full.shape
    cout, stride, frames = conv.weight.shape[1], conv.stride[0], length - 1
    per_frame = per_frame_products(full, conv.weight, products.mm)
    out = torch.empty(rows, frames * stride, cout, device=full.device, dtype=full.dtype)
    K.overlap_add_kernel[K.grid(frames * stride, cout, rows)](per_frame, conv.bias, out, frames, cout,
                                                             K.row_class(rows), STRIDE=stride)
    return out


def output(full: Tensor, conv) -> Tensor:
    """tanh(conv(full)) for the last convolution (C channels to 1, kernel K): [rows, T]."""
    rows, length, channels = full.shape
    frames = length - conv.left_pad
    out = torch.empty(rows, frames, device=full.device, dtype=full.dtype)
    bc = triton.next_power_of_2(channels)
    bt = max(K.TILE // bc, 16)
    K.output_conv_kernel[(triton.cdiv(frames, bt), 1, rows)](full, conv.weight, conv.bias, out, frames, channels,
                                                               K=conv.kernel_size[0], BT=bt, BC=bc)
    return out


def residual_unit(unit, x: Tensor, shifts: list[Tensor], chunk: KernelChunk,
                  products: Products) -> tuple[Tensor, list[Tensor]]:
    """x + pw(snake(dw(snake(x)))): returned as (x + the product, shifts + [pw's bias])."""
    snake_in, dw, snake_out, pw = unit.block
    full, (rows, frames, channels) = chunk.input(x, dw.slot, shifts, alpha=snake_in.alpha), x.shape
    if channels <= FUSED_CHANNELS:  # the product's weight fits beside the tile: one kernel
        K.residual_kernel[lambda meta: (triton.cdiv(frames, meta["BT"]), 1, rows)](
            full, dw.weight, dw.bias, snake_out.alpha, pw.weight, x, frames, channels, K.row_class(rows),
            CTX=dw.left_pad, K=dw.kernel_size[0], DILATION=dw.dilation[0],
            CP=max(16, triton.next_power_of_2(channels)), PRECISION=products.dot_precision(x.dtype))
        return x, [*shifts, pw.bias]
    h = depthwise(full, dw, snake_out.alpha)
    # In place: x is this chunk's own activation, already read into the unit's input (cuBLAS adds
    # it in its epilogue; an out-of-place addmm first copies it, 0.4 ms at 64 rows on an H200).
    products.mm(h.view(-1, channels), pw.weight, lambda w: w.view(channels, channels).t(), out=x.view(-1, channels))
    return x, [*shifts, pw.bias]


def decoder_block(block, cond, x: Tensor, shifts: list[Tensor], chunk: KernelChunk,
                  products: Products) -> tuple[Tensor, list[Tensor]]:
    snake, up, *units = block.block
    x, shifts = upsample(chunk.input(x, up.slot, shifts, cond, snake.alpha), up, products), []
    for unit in units:
        x, shifts = residual_unit(unit, x, shifts, chunk, products)
    return x, shifts


SPLIT_BLOCKS = 1  # the engine's default (docs/benchmarks.md, "The VAE decode")


class KernelStream:
    """Decoder.stream's contract through the kernels: z [B, F, latent] channels-last -> [B, F * hop];
    rows `rows` of root updated. The head and the first `split_blocks` decoder blocks (None: the
    default, SPLIT_BLOCKS) take split products, the rest plain ones; holds both policies."""

    def __init__(self, split_blocks: int | None = None):
        self.split_blocks = SPLIT_BLOCKS if split_blocks is None else split_blocks
        self.precise, self.plain = Products(precise=True), Products(precise=False)

    def __deepcopy__(self, memo) -> "KernelStream":  # a copied decoder has weights of its own
        return KernelStream(self.split_blocks)

    def __call__(self, decoder, z: Tensor, root: Tensor, rows: Tensor) -> Tensor:
        chunk = KernelChunk(root, rows, decoder.state_shapes)
        head_dw, head_pw, *blocks, snake, last, _tanh = decoder.model
        x = depthwise(chunk.input(z, head_dw.slot), head_dw, None)
        rows, frames, latent = x.shape
        head = self.precise if self.split_blocks > 0 else self.plain
        x = head.mm(x.reshape(-1, latent), head_pw.weight, lambda w: w[:, :, 0].t()).view(rows, frames, -1)
        shifts = [head_pw.bias]  # added where the first block reads x, as the units' biases are
        conditions = decoder.sr_cond_model or [None] * len(decoder.model)
        for i, block in enumerate(blocks):
            products = self.precise if i < self.split_blocks else self.plain
            x, shifts = decoder_block(block, conditions[i + 2], x, shifts, chunk, products)
        return output(chunk.input(x, last.slot, shifts, alpha=snake.alpha), last)
