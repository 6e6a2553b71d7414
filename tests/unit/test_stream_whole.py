"""The streamed chunks equal the whole-sequence VAE decode of the same latents, in every mode
(continuation included: there the decoder is warmed on the prompt's last patches)."""
import numpy as np
import pytest

from inference import Engine
from tests.support.app_helpers import decode_whole, first_prompt
from tests.unit.test_golden_parity import CASES, CKPT, _request, load_case


@pytest.fixture(scope="module")
def engine():
    return Engine.from_pretrained(str(CKPT), device="cpu", dtype="float32", warmup=False)


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.stem)
def test_stream_equals_whole_decode(engine, path):
    request = _request(load_case(path))
    chunks = list(engine.stream(request))
    assert all(c.audio.shape == (engine.cfg.patch_samples,) for c in chunks), "each chunk is one patch's delta"
    streamed = np.concatenate([c.audio for c in chunks])
    context = first_prompt(engine, request).decode_context
    whole = decode_whole(engine, np.stack([c.latents for c in chunks]), context)
    err = np.linalg.norm(streamed - whole) / np.linalg.norm(whole)
    assert streamed.shape == whole.shape and err < 1e-5, f"{path.stem}: rel err {err:.2e}"
