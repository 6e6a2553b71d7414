"""The fused layer kernels against the reference layer functions: one token per row (the LM step,
with per-row RoPE angles), short sequences (LocDiT's 11 positions in a batch of two, LocEnc's 5),
the last LocDiT layer's strided view of the patch positions, and the SiLU gate and residuals. On a
machine without CUDA, in Triton's interpreter (products in float32 there, exact for bf16 inputs)."""
import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402

from inference.model import layer_kernels  # noqa: E402
from inference.model import transformer as reference  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
HIDDEN, FFN, HEADS, KV, HEAD_DIM = 64, 96, 4, 2, 32
EPS, SCALE = 1e-5, 0.35


def weights(seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    w = lambda *shape: (torch.randn(*shape, generator=gen) / shape[-1] ** 0.5).to(torch.bfloat16).to(DEVICE)  # noqa: E731
    gains = (1 + 0.2 * torch.randn(2, HIDDEN, generator=gen)).to(torch.bfloat16).to(DEVICE)
    return dict(norm_in=gains[0], qkv=w((HEADS + 2 * KV) * HEAD_DIM, HIDDEN), o=w(HIDDEN, HEADS * HEAD_DIM),
                norm_mlp=gains[1], gate_up=w(2 * FFN, HIDDEN), down=w(HIDDEN, FFN))


def tables(seed: int = 1):
    gen = torch.Generator().manual_seed(seed)
    angles = torch.rand(64, HEAD_DIM // 2, generator=gen) * 6.3
    angles = torch.cat((angles, angles), dim=-1)
    return angles.cos().to(DEVICE), angles.sin().to(DEVICE)


def close(got, want, what: str):
    """Equal up to accumulation order: a couple of bf16 steps at most, on values of order 1-10."""
    err = (got.float() - want.float()).abs().max().item()
    scale = want.float().abs().max().item()
    assert err <= 0.02 * scale, f"{what}: max difference {err} on values up to {scale}"


@pytest.mark.parametrize("rows, positions", [(1, 1), (3, 1), (2, 11), (1, 5)])
def test_attention_inputs_equal_the_reference(rows, positions):
    w, (cos, sin) = weights(), tables()
    x = torch.randn(rows, positions, HIDDEN, generator=torch.Generator().manual_seed(rows)).to(torch.bfloat16).to(DEVICE)
    if positions == 1:  # the LM step: one angle per row, at the row's own position
        at = torch.tensor([5, 17, 40][:rows], device=DEVICE)
        cos, sin = cos[at].view(rows, 1, 1, -1), sin[at].view(rows, 1, 1, -1)
    else:  # a sequence: one angle per position, shared by the rows
        cos, sin = cos[:positions], sin[:positions]
    args = (x, w["norm_in"], w["qkv"], cos, sin, EPS, (HEADS, KV, HEAD_DIM))
    for name, got, want in zip("qkv", layer_kernels.attention_inputs(*args), reference.attention_inputs(*args)):
        assert got.shape == want.shape
        close(got, want, name)


def test_without_rope_nothing_is_rotated():
    """The residual LM has no RoPE: q, k and v are the plain projections."""
    w = weights(2)
    x = torch.randn(2, 1, HIDDEN, generator=torch.Generator().manual_seed(3)).to(torch.bfloat16).to(DEVICE)
    args = (x, w["norm_in"], w["qkv"], None, None, EPS, (HEADS, KV, HEAD_DIM))
    for name, got, want in zip("qkv", layer_kernels.attention_inputs(*args), reference.attention_inputs(*args)):
        close(got, want, name)


@pytest.mark.parametrize("rows, positions, keep", [(1, 1, None), (4, 1, None), (2, 11, None), (2, 11, 4)])
def test_layer_output_equals_the_reference(rows, positions, keep):
    w = weights(4)
    gen = torch.Generator().manual_seed(positions)
    x = (3 * torch.randn(rows, positions, HIDDEN, generator=gen)).to(torch.bfloat16).to(DEVICE)
    attn = torch.randn(rows, HEADS, positions, HEAD_DIM, generator=gen).to(torch.bfloat16).to(DEVICE)
    if keep:  # LocDiT's last layer: the patch's positions only, a strided view of the sequence
        x, attn = x[:, -keep:], attn[:, :, -keep:]
        assert not x.is_contiguous()
    args = (x, attn, w["o"], w["norm_mlp"], w["gate_up"], w["down"], EPS, SCALE)
    got, want = layer_kernels.layer_output(*args), reference.layer_output(*args)
    assert got.shape == want.shape
    close(got, want, "layer output")
    # the residual is really there: without it the result would be far off
    assert (got.float() - (want.float() - x.float())).abs().max() > 0.5
