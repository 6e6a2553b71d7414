"""The DiT on the optional Hopper kernels (inference/runtime/hopper.py, requirements-gpu.txt).
Skipped where they cannot run (CI, other GPUs, the extra not installed); run on the device
machine, outcome recorded in docs/benchmarks.md ("The LocDiT on Hopper kernels")."""
import copy

import pytest
import torch

from inference.model.config import ModelConfig
from inference.model.locdit import LocDiT
from inference.model.transformer import PLAIN_OPS
from inference.runtime import hopper
from inference.runtime.compiled import compiled_ops, hopper_choices

pytestmark = pytest.mark.skipif(hopper.unavailable() is not None, reason=f"Hopper kernels: {hopper.unavailable()}")


@pytest.fixture(scope="module")
def dits():
    """The published LocDiT with random weights, in bf16 and the same weights in float32."""
    cfg = ModelConfig.from_json("bench/voxcpm2_config.json")
    torch.manual_seed(0)
    with torch.device("cuda"):
        dit = LocDiT(cfg.local_dit, cfg.feat_dim).to(torch.bfloat16).eval()
    reference = copy.deepcopy(dit).float()
    dit.decoder.fuse_projections()
    reference.decoder.fuse_projections()
    return cfg, dit, reference


@pytest.mark.parametrize("rows", [1, 64, 128])
@pytest.mark.parametrize("choice", ["hopper", "hopper + RoPE"])
@torch.inference_mode()
def test_each_hopper_choice_is_as_close_to_float32_as_the_official_rounding(dits, rows, choice):
    """A DiT call (the guided pair: 2 x rows sequences of 11 positions, the last layer on the
    patch's 4) with each set of Hopper layer functions, against the same weights in float32:
    within 1.2x the plain functions' bf16 error (the official's order of rounding)."""
    cfg, dit, reference = dits
    engine = compiled_ops()
    chosen = dict(hopper_choices(engine))[choice]
    tokens = torch.randn(2 * rows, 3 + 2 * cfg.patch_size, cfg.local_dit.hidden_size, device="cuda",
                         dtype=torch.bfloat16, generator=torch.Generator("cuda").manual_seed(rows))
    want = reference.decoder(tokens.float(), causal=False, keep=cfg.patch_size)

    def error(ops):
        got = dit.decoder(tokens, causal=False, ops=ops, keep=cfg.patch_size).float()
        return ((got - want).norm() / want.norm()).item()

    ours, official_order, compiled = error(chosen), error(PLAIN_OPS), error(engine)
    assert ours <= 1.2 * official_order, (f"{choice}, {rows} rows: {ours:.3e} against the plain functions' "
                                          f"{official_order:.3e} (compiled cuBLAS path {compiled:.3e})")


@torch.inference_mode()
def test_warmup_times_every_choice_per_bucket_and_each_bucket_runs_the_fastest(tmp_path):
    from inference import Engine, SynthesisRequest
    from inference.model.tiny_checkpoint import write_tiny_checkpoint

    engine = Engine.from_pretrained(str(write_tiny_checkpoint(tmp_path / "ckpt", seed=3)), device="cuda",
                                    dtype="bfloat16", max_streams=8)
    runner = engine.runner
    assert sorted(runner.dit_choice) == sorted(runner.buckets)
    choices = runner.step.fns.dit_options
    assert list(choices) == ["cuBLAS", "hopper", "hopper + RoPE"]
    for b, times in runner.dit_choice.items():
        assert list(times) == list(choices) and all(ms > 0 for ms in times.values()), (b, times)
        assert runner.step.dit_ops[b] is choices[runner.dit_chosen[b]]
    audio = engine.synthesize(SynthesisRequest("Hello there, the fastest kernels speak.", seed=1, min_len=4, max_len=4))
    assert audio.size > 0 and bool(torch.isfinite(torch.from_numpy(audio)).all())
