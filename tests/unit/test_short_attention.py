"""The short-sequence attention kernel against SDPA: LocDiT's shapes (11 positions, grouped heads,
the last layer's 4 queries), LocEnc's 5, strided views as the fused QKV projection leaves them, and
the sequences it hands back to SDPA. On a machine without CUDA, in Triton's interpreter."""
import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402

from inference.model.short_attention import short_attention  # noqa: E402
from inference.model.transformer import sequence_attention  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def qkv_views(n: int, t: int, heads: int = 8, kv: int = 2, dim: int = 32, seed: int = 0):
    """q, k, v [n, heads, t, dim] as views of one fused projection output [n, t, heads + 2 kv, dim]."""
    gen = torch.Generator().manual_seed(seed)
    fused = torch.randn(n, t, heads + 2 * kv, dim, generator=gen).to(DEVICE)
    return fused.transpose(1, 2).split((heads, kv, kv), dim=1)


@pytest.mark.parametrize("positions", [11, 5, 16])
def test_equals_sdpa_with_grouped_heads(positions):
    q, k, v = qkv_views(3, positions)
    torch.testing.assert_close(short_attention(q, k, v, False), sequence_attention(q, k, v, False),
                               rtol=2e-3, atol=2e-3)  # tl.dot may round its inputs to TF32


def test_the_last_queries_alone_equal_the_last_rows():
    q, k, v = qkv_views(2, 11, seed=1)
    whole = sequence_attention(q, k, v, False)
    torch.testing.assert_close(short_attention(q[:, :, -4:], k, v, False), whole[:, :, -4:], rtol=2e-3, atol=2e-3)


def test_other_sequences_go_to_sdpa():
    long_q, long_k, long_v = qkv_views(1, 17, seed=2)
    torch.testing.assert_close(short_attention(long_q, long_k, long_v, False),
                               sequence_attention(long_q, long_k, long_v, False))
    q, k, v = qkv_views(1, 6, seed=3)
    causal = short_attention(q, k, v, True)
    torch.testing.assert_close(causal, sequence_attention(q, k, v, True))
    assert not torch.allclose(causal, sequence_attention(q, k, v, False))


def test_the_output_is_laid_out_for_the_output_projection():
    """[N, H, T, D] viewed over [N, T, H, D] memory, as flash returns it: the projection's reshape is free."""
    q, k, v = qkv_views(2, 11, seed=4)
    out = short_attention(q, k, v, False)
    assert out.shape == q.shape and out.transpose(1, 2).is_contiguous()


def test_the_step_functions_take_the_kernel_with_an_off_switch(monkeypatch):
    from inference.model import short_attention as module
    from inference.runtime.compiled import compiled_ops

    launched = []
    real = module._short_attention_kernel
    monkeypatch.setattr(module, "_short_attention_kernel", type("Spy", (), {
        "__getitem__": lambda self, grid: (launched.append(grid), real[grid])[1]})())
    q, k, v = qkv_views(2, 11, seed=5)
    expected = sequence_attention(q, k, v, False)
    torch.testing.assert_close(compiled_ops().sequence_attention(q, k, v, False), expected, rtol=2e-3, atol=2e-3)
    assert launched == [(2 * 8,)]
    torch.testing.assert_close(compiled_ops(short_kernel=False).sequence_attention(q, k, v, False), expected)
    assert len(launched) == 1
