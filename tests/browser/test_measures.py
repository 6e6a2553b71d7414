"""The workbench's level figures (static/workbench/measures.js) run in Node: the K-weighting
filters equal BS.1770-4's published 48 kHz coefficients, a 997 Hz sine reads its known loudness,
the gates leave silence out, the true peak finds the peak between samples, and clipping, DC offset
and the silence before and after are counted. Where pyloudnorm is installed, loudness agrees with it."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
RATE = 48000

if not shutil.which("node"):
    pytest.skip("node is needed to run the page's JavaScript", allow_module_level=True)


def run(pcm: np.ndarray, rate: int = RATE) -> dict:
    out = subprocess.run(["node", str(ROOT / "tests/support/measures_harness.mjs"), str(ROOT / "static/workbench/measures.js"),
                          str(rate)], input=pcm.astype("<i2").tobytes(), capture_output=True, check=True, timeout=60)
    return json.loads(out.stdout)


def sine(db_fs: float, seconds: float = 3.0, freq: float = 997.0, rate: int = RATE, phase: float = 0.0) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    return np.rint(32767 * 10 ** (db_fs / 20) * np.sin(2 * np.pi * freq * t + phase)).astype(np.int16)


def test_k_weighting_at_48k_is_the_standards():
    shelf, high_pass = run(np.zeros(10, np.int16))["filters"]
    assert np.allclose(shelf["b"], [1.53512485958697, -2.69169618940638, 1.19839281085285], atol=1e-9)
    assert np.allclose(shelf["a"], [1, -1.69065929318241, 0.73248077421585], atol=1e-9)
    assert np.allclose(high_pass["b"], [1, -2, 1]) and np.allclose(high_pass["a"], [1, -1.99004745483398, 0.99007225036621], atol=1e-9)


@pytest.mark.parametrize("db_fs", [-3.01, -20.0, -26.0])
def test_a_sine_reads_its_loudness(db_fs):
    # A 997 Hz sine of amplitude A (full scale 1) reads 20 log10(A) - 3.01 LUFS: K-weighting is ~0 dB there.
    lufs = run(sine(db_fs))["figures"]["lufs"]
    assert abs(lufs - (db_fs - 3.01)) < 0.1, lufs


def test_the_gates_leave_silence_out_and_silence_is_measured():
    tone = sine(-20.0, 2.0)
    pcm = np.concatenate([np.zeros(RATE // 2, np.int16), tone, np.zeros(RATE, np.int16)])
    longer = np.concatenate([pcm, np.zeros(RATE * 8, np.int16)])
    f = run(pcm)["figures"]
    assert f["lufs"] == run(longer)["figures"]["lufs"]  # blocks of silence alone are gated out
    assert abs(f["lead_silence_ms"] - 500) < 1 and abs(f["tail_silence_ms"] - 1000) < 1.5
    assert run(np.zeros(RATE, np.int16))["figures"]["lufs"] == "-Infinity"


def test_true_peak_finds_the_peak_between_samples():
    # A sine at a quarter of the rate, sampled 45 degrees off its peaks: samples reach 0.707 of it.
    pcm = sine(-6.0, 1.0, freq=RATE / 4, phase=np.pi / 4)
    f = run(pcm)["figures"]
    sample_peak = 20 * np.log10(np.max(np.abs(pcm)) / 32768)
    assert abs(f["true_peak_dbtp"] - (-6.0)) < 0.5 and f["true_peak_dbtp"] > sample_peak + 2.5


def test_clipping_and_dc_offset():
    pcm = np.clip(sine(3.0, 1.0).astype(np.int32) + 1000, -32768, 32767).astype(np.int16)
    f = run(pcm)["figures"]
    assert f["clipped_samples"] == int(np.sum((pcm >= 32767) | (pcm <= -32768))) > 0
    assert abs(f["dc_offset"] - pcm.mean() / 32768) < 1e-9


def test_loudness_agrees_with_pyloudnorm():
    pyln = pytest.importorskip("pyloudnorm")
    rng = np.random.default_rng(0)
    noise = rng.normal(0, 0.1, RATE * 3)
    noise[RATE:RATE + RATE // 2] *= 0.01  # a quiet stretch the relative gate drops
    pcm = np.clip(np.rint(noise * 32767), -32768, 32767).astype(np.int16)
    want = pyln.Meter(RATE).integrated_loudness(pcm / 32768.0)
    assert abs(run(pcm)["figures"]["lufs"] - want) < 0.05
