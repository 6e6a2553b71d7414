"""The streaming decoder's Triton kernels (inference/model/vae_kernel_stream.py) against the
reference convolutions: chunks of 1 to 8 frames, batch buckets of 3, 1 and 2 rows over one state,
a single row anywhere, a reset per row, with and without the sample-rate condition. On a machine
without CUDA the kernels run in Triton's interpreter (set before Triton is first imported)."""
import copy
import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402

from inference.model import vae_kernel_stream  # noqa: E402
from inference.model.audio_vae import Decoder  # noqa: E402
from inference.model.config import VAEConfig  # noqa: E402
from tests.unit.test_vae_stream import TINY, chunk_sizes, latents, randomized, rel_err  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.fixture(autouse=True)
def plain_float32():
    """On CUDA, both sides in float32 without TF32 (the kernels' GEMMs follow cuDNN's flag)."""
    before = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cudnn.allow_tf32 = before


@pytest.fixture(scope="module")
def kernels():
    """The tiny decoder with the kernel path switched on, and a plain copy of it."""
    model = randomized(TINY).to(DEVICE)
    fast = copy.deepcopy(model)
    fast.decoder.compile_stream()
    assert isinstance(fast.decoder.stream_impl, vae_kernel_stream.KernelStream)
    return fast, model


# On the GPU each chunk length once for the one-kernel form, and the shortest, a middle and the
# longest for the other. In Triton's interpreter on a CPU each frame costs one to four seconds: there
# lengths 1, 2 and 5 for the one (each of the three batch buckets once), the shortest and the
# longest for the other.
ONE_KERNEL_SIZES = chunk_sizes(36, 0) if DEVICE == "cuda" else [1, 2, 5]
SPLIT_SIZES = [1, 3, 8] if DEVICE == "cuda" else [1, 8]


@pytest.mark.parametrize("fused, sizes", [(128, ONE_KERNEL_SIZES), (0, SPLIT_SIZES)],
                         ids=["one-kernel-units", "depthwise-then-addmm"])
def test_chunks_of_1_to_8_frames_and_buckets_equal_the_reference_layers(kernels, fused, sizes, monkeypatch):
    """Both forms of a residual unit: one kernel (narrow units) and depthwise kernel + cuBLAS."""
    monkeypatch.setattr(vae_kernel_stream, "FUSED_CHANNELS", fused)
    fast, model = kernels
    z = latents(3, sum(sizes), 0).to(DEVICE)
    state, reference = fast.new_decoder_state(3), model.new_decoder_state(3)
    start, buckets = 0, [3, 1, 2]
    with torch.no_grad():
        for i, size in enumerate(sizes):
            b = buckets[i % 3]
            chunk = z[:b, :, start: start + size]
            got = fast.decode_chunk(chunk, state.rows(b))
            expected = model.decoder(chunk, reference.rows(b)).squeeze(1)
            assert got.shape == expected.shape
            assert rel_err(got, expected) < 1e-5, (i, size, b)
            start += size
    assert rel_err(state.root, reference.root) < 1e-5


def test_one_row_anywhere_and_a_reset_restart_that_row_only(kernels):
    fast, model = kernels
    first, second = latents(3, 2, 1).to(DEVICE), latents(3, 3, 2).to(DEVICE)
    state = fast.new_decoder_state(3)
    with torch.no_grad():
        fast.decode_chunk(first, state)
        state.reset(1)
        alone = fast.decode_chunk(second[2:], state.row(2))
        restarted = fast.decode_chunk(second[1:2], state.row(1))
        whole = model.decode(torch.cat([first, second], dim=-1))
        fresh = model.decode(second[1:2])
    assert rel_err(alone, whole[2:, -alone.shape[-1]:]) < 1e-5
    assert rel_err(restarted, fresh) < 1e-5


def test_without_the_sample_rate_condition():
    cfg = VAEConfig(**{**vars(TINY), "sr_bin_boundaries": None})
    model = randomized(cfg, seed=3).to(DEVICE)
    fast = copy.deepcopy(model)
    fast.decoder.compile_stream()
    z = latents(2, 3, 4).to(DEVICE)
    state = fast.new_decoder_state(2)
    with torch.no_grad():
        got = torch.cat([fast.decode_chunk(z[..., a: a + 1], state) for a in (0, 1, 2)], dim=-1)
        whole = model.decode(z)
    assert rel_err(got, whole) < 1e-5


def test_the_dense_decoder_keeps_the_compiled_formulation():
    cfg = VAEConfig(**{**vars(TINY), "depthwise": False})
    model = randomized(cfg, seed=5)
    model.decoder.compile_stream()
    assert not isinstance(model.decoder.stream_impl, vae_kernel_stream.KernelStream)
    assert model.decoder.stream_impl is not Decoder.stream
