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
TEXTS = ("Precision check: the same noise through both implementations.", "Hello world, this is a test of the voice.",
         "A second sentence, with other words in it.", "Numbers and letters read aloud today.")
# bf16 against float32 is a random walk of roundings: ours and the official's take different (equally
# valid) roundings, so on one text the two distances differ by tens of percent, and which is larger
# depends on the text and on the CPU's bf16 arithmetic. On an AMD EPYC (2026-11-27), text by text,
# ours was 0.86-1.13 of the bound by mean and 0.58-1.31 on the largest patch (the first text alone,
# held to 1.2 on its largest patch, failed there); over the four texts together, 0.97 by mean. So
# the bound holds the mean over all of them: ours stays of the official's own order. What catches a
# difference of implementation is the float32 test below (1e-5); the bf16 softmax and norm-variance
# mutations once said to fail this test move the pooled mean by under 1% on the tiny checkpoint.
WITHIN = 1.2


@pytest.fixture(scope="module")
def pairs() -> dict[str, list[float]]:
    """Each pair's per-patch relative errors over all the texts."""
    source = weights.Source(folder=str(CKPT))
    engines = {dtype: weights.our_engine(source, vae_dtype="float32", cuda_graphs=False, compile=False, dtype=dtype,
                                         device="cpu", max_streams=2, warmup=False) for dtype in ("bfloat16", "float32")}
    pooled: dict[str, list[float]] = {}
    for text in TEXTS:
        ours = {dtype: official_side.latents_for_parity(engine, text) for dtype, engine in engines.items()}
        for pair, errors in official_side.precision(source, text, ours, device="cpu").items():
            pooled.setdefault(pair, []).extend(errors)
    return pooled


def test_float32_latents_equal_the_official_float32(pairs):
    errors = pairs["ours float32 against official float32"]
    assert len(errors) >= len(TEXTS) * (official_side.PARITY_PATCHES - 1)
    assert max(errors) < 1e-5, errors


def test_bf16_latents_stay_within_the_official_bf16_error(pairs):
    bound = pairs["official bf16 against official float32 (the bound)"]
    ours = pairs["ours bf16 against official float32"]
    assert min(bound) > 1e-4, "bf16 should differ from float32: the comparison would prove nothing"
    assert np.mean(ours) <= WITHIN * np.mean(bound), (np.mean(ours) / np.mean(bound), ours, bound)
