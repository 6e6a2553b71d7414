"""Ours in bf16 is held to the official package's own bf16 error, not to a fixed tolerance.

On the tiny checkpoint, with the same weights and the same CFM noise of every patch, both
implementations run in bf16 and in float32 (bench/official_side.py's `precision`, the function
`python bench/bench.py --precision` runs on a GPU). The official bf16 latents' distance from the
official float32 ones is the error bf16 itself makes; ours in bf16 must stay within the same order
of it, and ours in float32 must equal the official float32 (so the bf16 gap is precision, not a
difference of implementation).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bench import official_side, weights

CKPT = Path(__file__).resolve().parents[1] / "golden" / "ckpt"
TEXT = "Precision check: the same noise through both implementations."
# bf16 against float32 is a random walk of roundings: ours and the official's take different
# (equally valid) roundings, so the two distances differ by some percent. Measured on this text: ours
# 0.88 of the bound by mean, 0.86 on the largest patch; with the decode attention's softmax taken in
# bf16, or a norm's variance summed in bf16 (the official takes both in float32), 1.32 on the largest.
WITHIN = 1.2


@pytest.fixture(scope="module")
def pairs() -> dict[str, list[float]]:
    source = weights.Source(folder=str(CKPT))
    ours = {}
    for dtype in ("bfloat16", "float32"):
        engine = weights.our_engine(source, vae_dtype="float32", cuda_graphs=False, compile=False, dtype=dtype,
                                    device="cpu", max_streams=2, warmup=False)
        ours[dtype] = official_side.latents_for_parity(engine, TEXT)
    return official_side.precision(source, TEXT, ours, device="cpu")


def test_float32_latents_equal_the_official_float32(pairs):
    errors = pairs["ours float32 against official float32"]
    assert len(errors) >= official_side.PARITY_PATCHES - 1
    assert max(errors) < 1e-5, errors


def test_bf16_latents_stay_within_the_official_bf16_error(pairs):
    bound = pairs["official bf16 against official float32 (the bound)"]
    ours = pairs["ours bf16 against official float32"]
    assert min(bound) > 1e-4, "bf16 should differ from float32: the comparison would prove nothing"
    assert np.mean(ours) <= WITHIN * np.mean(bound), (ours, bound)
    assert max(ours) <= WITHIN * max(bound), (ours, bound)
