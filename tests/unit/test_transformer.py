"""The cached single-token step must reproduce the whole-sequence forward (chunked equals whole)."""
import torch

from inference.model.config import ModelConfig
from inference.model.locdit import euler_schedule, guided_velocity, zero_velocity_steps
from inference.model.transformer import KVCache, Transformer
from inference.model.tiny_checkpoint import tiny_config

CFG = ModelConfig.from_dict(tiny_config())


def random_transformer(cfg, seed=0):
    torch.manual_seed(seed)
    model = Transformer(cfg).double()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn_like(p) * 0.3)
    model.fuse_projections()
    return model


def test_steps_equal_whole_sequence_forward():
    for cfg in (CFG.base_lm, CFG.residual_lm):  # with and without RoPE
        model = random_transformer(cfg)
        x = torch.randn(1, 12, cfg.hidden_size, dtype=torch.float64)
        whole = model(x, causal=True)
        cache = KVCache(cfg, 32, 1, "cpu", torch.float64)
        model(x[:, :5], causal=True, cache=cache, rows=torch.tensor([0]))
        for pos in range(5, 12):
            out = model.step(x[:, pos], torch.tensor([pos]), cache, span=pos + 1)
            torch.testing.assert_close(out, whole[:, pos], rtol=1e-10, atol=1e-10)


def test_keeping_the_last_positions_equals_slicing_the_whole_output():
    """LocDiT reads only its noisy patch's positions: the last layer computes those alone."""
    import pytest

    cfg = CFG.local_dit
    model = random_transformer(cfg, seed=2)
    x = torch.randn(3, 11, cfg.hidden_size, dtype=torch.float64)
    whole = model(x, causal=False)
    kept = model(x, causal=False, keep=4)
    assert kept.shape == (3, 4, cfg.hidden_size)
    torch.testing.assert_close(kept, whole[:, -4:], rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="non-causal"):
        model(x, causal=True, keep=4)


def test_masked_span_equals_exact_span():
    """A length bucket larger than the sequence gives the same result: unread slots are masked."""
    cfg = CFG.base_lm
    model = random_transformer(cfg, seed=1)
    x = torch.randn(1, 8, cfg.hidden_size, dtype=torch.float64)
    exact, bucketed = (KVCache(cfg, 32, 1, "cpu", torch.float64) for _ in range(2))
    for cache in (exact, bucketed):
        model(x[:, :6], causal=True, cache=cache, rows=torch.tensor([0]))
    bucketed.k[:, :, :, 7:] = 1e3  # stale garbage after the position must not leak in
    a = model.step(x[:, 6], torch.tensor([6]), exact, span=7)
    b = model.step(x[:, 6], torch.tensor([6]), bucketed, span=32)
    torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)


def test_rows_at_different_positions_step_as_if_alone():
    """One step of three cache rows, each at its own position (prefilled into rows given out of
    order), equals each sequence stepped alone: rows neither mix nor see each other's slots."""
    cfg = CFG.base_lm
    model = random_transformer(cfg, seed=2)
    lengths = (3, 9, 6)
    xs = [torch.randn(1, n + 1, cfg.hidden_size, dtype=torch.float64) for n in lengths]
    alone = []
    for x, n in zip(xs, lengths):
        cache = KVCache(cfg, 32, 1, "cpu", torch.float64)
        model(x[:, :n], causal=True, cache=cache, rows=torch.tensor([0]))
        alone.append(model.step(x[:, n], torch.tensor([n]), cache, span=16))
    batch = KVCache(cfg, 32, 4, "cpu", torch.float64)
    batch.k.fill_(1e3)  # whatever an earlier stream left must stay masked
    for row in (2, 0, 1):
        model(xs[row][:, : lengths[row]], causal=True, cache=batch, rows=torch.tensor([row]))
    together = model.step(torch.cat([x[:, n] for x, n in zip(xs, lengths)]), torch.tensor(lengths), batch, span=16)
    torch.testing.assert_close(together, torch.cat(alone), rtol=1e-10, atol=1e-10)


def test_cfg_one_returns_the_conditioned_velocity():
    v_c, v_u = torch.randn(2, 4, 64, dtype=torch.float64), torch.randn(2, 4, 64, dtype=torch.float64)
    torch.testing.assert_close(guided_velocity(v_c, v_u, 1.0), v_c)
    # with the optimal scale, the unconditioned branch projected on itself is unchanged
    torch.testing.assert_close(guided_velocity(v_u, v_u, 3.0), v_u)


def test_euler_schedule_reaches_zero_and_skips_the_first_step():
    schedule = euler_schedule(10, torch.float64)
    assert len(schedule) == 10 and zero_velocity_steps(10) == 1
    t_end = schedule[-1][0] - schedule[-1][1]
    assert abs(float(schedule[0][0]) - 1.0) < 1e-12 and abs(float(t_end)) < 1e-12
    assert all(float(dt) > 0 for _, dt in schedule)


def test_pinned_sequence_attention_equals_sdpa_and_falls_back_where_a_backend_is_missing():
    """The fast path restricts LocEnc/LocDiT attention to some SDPA backends: whichever of them
    the device runs, and the math kernel alone, give SDPA's own result."""
    from torch.nn.attention import SDPBackend

    from inference.runtime.compiled import pinned_attention
    from inference.model.transformer import sequence_attention

    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, h, 11, 32, generator=gen) for h in (8, 2, 2))
    pinned = pinned_attention((SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH))
    math_only = pinned_attention((SDPBackend.MATH,))
    for causal in (False, True):
        want = sequence_attention(q, k, v, causal)
        torch.testing.assert_close(pinned(q, k, v, causal), want)
        torch.testing.assert_close(math_only(q, k, v, causal), want)
