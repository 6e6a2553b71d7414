"""The streaming decoder's GPU formulation (inference/model/vae_stream.py, `Decoder.stream`) against
the reference convolutions: each layer kind, then the whole decoder in chunks of 1 to 8 frames,
several rows, a state reset per row; compiled (inductor) on CUDA, and on the CPU when asked."""
import copy
import os
import random

import pytest
import torch
import torch.nn.functional as F

from bench.lab.vae_decode import random_weights
from inference.model.audio_vae import AudioVAE, Decoder
from inference.model.config import VAEConfig
from inference.model.vae_stream import ChunkContext, dense, depthwise, upsample

TINY = VAEConfig(
    encoder_dim=8, encoder_rates=(2, 5, 8, 8), latent_dim=16, decoder_dim=64,
    decoder_rates=(8, 6, 5, 2, 2, 2), depthwise=True, sample_rate=16000, out_sample_rate=48000,
    sr_bin_boundaries=(20000, 30000, 40000),
)
ROWS = 3


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).norm() / b.norm()).item()


def chunk_sizes(total: int, seed: int) -> list[int]:
    """Random chunk lengths of 1 to 8 frames adding up to `total` (each length once when total >= 36)."""
    rng = random.Random(seed)
    sizes = rng.sample(range(1, 9), 8) if total >= 36 else []
    while sum(sizes) < total:
        sizes.append(rng.randint(1, 8))
    sizes[-1] -= sum(sizes) - total
    return sizes


def randomized(cfg: VAEConfig, seed: int = 0) -> AudioVAE:
    return random_weights(AudioVAE(cfg).eval(), seed)


@pytest.fixture(scope="module")
def vae():
    return randomized(TINY)


def latents(rows: int, frames: int, seed: int, dtype=torch.float32) -> torch.Tensor:
    return torch.randn(rows, TINY.latent_dim, frames, generator=torch.Generator().manual_seed(seed)).to(dtype)


def stream_layer(layer, x: torch.Tensor, channels: int, context: int, sizes: list[int]) -> torch.Tensor:
    """Runs `layer(full)` chunk by chunk over x [rows, C, T], its context carried by ChunkContext."""
    flat = torch.zeros(x.shape[0], channels * context, dtype=x.dtype)
    out, start = [], 0
    for size in sizes:
        chunk = ChunkContext(flat, [(channels, context)])
        out.append(layer(chunk.extend(0, x[..., start: start + size].transpose(1, 2))))
        flat, start = chunk.updated(), start + size
    return torch.cat(out, dim=1).transpose(1, 2)


@pytest.mark.parametrize("dilation", [1, 3, 9])
def test_depthwise_shifted_sum_equals_the_convolution(dilation):
    gen = torch.Generator().manual_seed(dilation)
    x, w, b = (torch.randn(ROWS, 12, 40, generator=gen), torch.randn(12, 1, 7, generator=gen),
               torch.randn(12, generator=gen))
    expected = F.conv1d(F.pad(x, (6 * dilation, 0)), w, b, dilation=dilation, groups=12)
    got = stream_layer(lambda full: depthwise(full, w, b, dilation), x, 12, 6 * dilation, chunk_sizes(40, dilation))
    assert rel_err(got, expected) < 1e-6


@pytest.mark.parametrize("cout,kernel,dilation", [(5, 7, 1), (1, 7, 1), (5, 7, 3), (5, 1, 1)])
def test_dense_gemm_then_shifted_sum_equals_the_convolution(cout, kernel, dilation):
    gen = torch.Generator().manual_seed(kernel + cout)
    x, w, b = (torch.randn(ROWS, 6, 40, generator=gen), torch.randn(cout, 6, kernel, generator=gen),
               torch.randn(cout, generator=gen))
    context = (kernel - 1) * dilation
    expected = F.conv1d(F.pad(x, (context, 0)), w, b, dilation=dilation)
    if context == 0:
        got = dense(x.transpose(1, 2), w, b, dilation).transpose(1, 2)
    else:
        got = stream_layer(lambda full: dense(full, w, b, dilation), x, 6, context, chunk_sizes(40, cout))
    assert rel_err(got, expected) < 1e-6


@pytest.mark.parametrize("stride", [2, 3, 5, 8])
def test_upsample_gemm_then_overlap_add_equals_the_transposed_convolution(stride):
    gen = torch.Generator().manual_seed(stride)
    x, w, b = (torch.randn(ROWS, 6, 30, generator=gen), torch.randn(6, 4, 2 * stride, generator=gen),
               torch.randn(4, generator=gen))
    expected = F.conv_transpose1d(x, w, b, stride=stride)[..., :-stride]
    got = stream_layer(lambda full: upsample(full, w, b, stride), x, 6, 1, chunk_sizes(30, stride))
    assert got.shape == expected.shape
    assert rel_err(got, expected) < 1e-6


def stream(model: AudioVAE, z: torch.Tensor, sizes: list[int], state=None) -> torch.Tensor:
    state = model.new_decoder_state(z.shape[0], dtype=z.dtype) if state is None else state
    bounds = torch.tensor([0] + sizes).cumsum(0).tolist()
    with torch.no_grad():
        return torch.cat([model.decode_chunk(z[..., a:b], state) for a, b in zip(bounds, bounds[1:])], dim=-1)


def test_the_test_weights_keep_the_decoder_alive(vae):
    with torch.no_grad():
        audio = vae.decode(latents(ROWS, 8, 0))
    assert (audio[0] - audio[1]).std() > 0.05 and (audio.abs() > 0.99).float().mean() < 0.05


@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-10), (torch.float32, 1e-5)])
@pytest.mark.parametrize("seed", [0, 1])
def test_streamed_in_chunks_of_1_to_8_frames_equals_the_whole_decode(vae, dtype, tol, seed):
    model = copy.deepcopy(vae).to(dtype)
    z = latents(ROWS, 36, seed, dtype)
    with torch.no_grad():
        whole = model.decode(z)
    got = stream(model, z, chunk_sizes(36, seed))
    for row in range(ROWS):
        assert rel_err(got[row], whole[row]) < tol


def test_a_reset_restarts_its_row_only(vae):
    first, second = latents(ROWS, 12, 2), latents(ROWS, 14, 3)
    state = vae.new_decoder_state(ROWS)
    before = stream(vae, first, chunk_sizes(12, 4), state)
    state.reset(1)
    after = stream(vae, second, chunk_sizes(14, 5), state)
    with torch.no_grad():
        continued = vae.decode(torch.cat([first, second], dim=-1))
        restarted = vae.decode(second[1:2])[0]
    assert rel_err(before, continued[:, : before.shape[-1]]) < 1e-5
    for row in (0, 2):
        assert rel_err(after[row], continued[row, before.shape[-1]:]) < 1e-5
    assert rel_err(after[1], restarted) < 1e-5


def test_rows_and_row_views_touch_only_their_rows(vae):
    z = latents(4, 8, 6)
    state = vae.new_decoder_state(4)
    with torch.no_grad():
        vae.decode_chunk(z[:2, :, :4], state.rows(2))
        assert state.root[2:].abs().sum() == 0
        vae.decode_chunk(z[3:, :, :4], state.row(3))
        assert state.root[2].abs().sum() == 0 and state.root[3].abs().sum() > 0
        vae.decode_chunk(z[:, :, 4:], state)
        whole = vae.decode(z)
    alone = stream(vae, z[3:], [4, 4])
    assert rel_err(alone, whole[3:]) < 1e-5


def test_stream_and_reference_layers_keep_the_same_state(vae):
    """Both formulations read and write one DecoderState layout: they can take turns."""
    z = latents(ROWS, 16, 7)
    fast, slow = vae.new_decoder_state(ROWS), vae.new_decoder_state(ROWS)
    with torch.no_grad():
        for start, size in zip([0, 3, 8], [3, 5, 8]):
            a = vae.decode_chunk(z[..., start: start + size], fast)
            b = vae.decoder(z[..., start: start + size], slow).squeeze(1)
            assert rel_err(a, b) < 1e-5
            assert rel_err(fast.root, slow.root) < 1e-5


def test_without_depthwise_or_sample_rate_condition():
    cfg = VAEConfig(**{**vars(TINY), "sr_bin_boundaries": None, "depthwise": False})
    model = randomized(cfg, seed=8)
    z = latents(ROWS, 20, 9)
    with torch.no_grad():
        whole = model.decode(z)
    assert rel_err(stream(model, z, chunk_sizes(20, 9)), whole) < 1e-5


def test_a_deep_copy_decodes_with_its_own_weights(vae):
    other = copy.deepcopy(vae)
    with torch.no_grad():
        for p in other.decoder.parameters():
            p.mul_(0.5)
    z = latents(1, 4, 10)
    assert rel_err(stream(other, z, [4]), stream(vae, z, [4])) > 0.01


def check_compiled(model: AudioVAE, device: str, buckets=(3, 1, 2), kernels: bool = False) -> None:
    """The compiled decode (inductor, or the Triton kernels), chunk by chunk and bucket by bucket,
    against the reference layers."""
    model = copy.deepcopy(model).to(device)
    model.decoder.compile_stream(kernels=kernels)
    z = latents(3, 24, 11).to(device)
    fast, slow = model.new_decoder_state(3), model.new_decoder_state(3)
    with torch.no_grad():
        for i, b in enumerate(buckets * 2):
            chunk = z[:b, :, 4 * i: 4 * i + 4]
            got = model.decode_chunk(chunk, fast.rows(b))
            expected = model.decoder(chunk, slow.rows(b)).squeeze(1)
            assert rel_err(got, expected) < 1e-5
        got = model.decode_chunk(z[1:2, :, :12], fast.row(1))
        assert rel_err(got, model.decoder(z[1:2, :, :12], slow.row(1)).squeeze(1)) < 1e-5
    assert rel_err(fast.root, slow.root) < 1e-5
    model.decoder.compile_stream(False)
    assert model.decoder.stream_impl is Decoder.stream


@pytest.mark.skipif(not os.environ.get("VAE_COMPILE_TESTS"), reason="inductor's C++ build takes minutes on a CPU: "
                    "set VAE_COMPILE_TESTS=1")
def test_compiled_on_the_cpu_equals_the_reference_layers(vae):
    check_compiled(vae, "cpu")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("kernels", [False, True], ids=["inductor", "triton-kernels"])
def test_compiled_on_cuda_equals_the_reference_layers(vae, kernels):
    tf32 = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False  # both formulations in plain float32 (the GEMMs follow it)
    try:
        check_compiled(vae, "cuda", kernels=kernels)
    finally:
        torch.backends.cudnn.allow_tf32 = tf32


def test_the_tf32_flag_is_restored_whatever_threads_decode_at_once():
    """Engines of several GPUs decode on threads of their own: the process-wide flag must end as
    it began. Unguarded, A enters, B enters (finding A's value as its 'before'), A leaves, B leaves
    last and leaves A's value behind."""
    import threading

    from inference.model.vae_stream import conv_precision

    start = torch.backends.cuda.matmul.allow_tf32
    a_in, b_in, a_out, inside = threading.Event(), threading.Event(), threading.Event(), []

    def a():
        with conv_precision():
            inside.append(torch.backends.cuda.matmul.allow_tf32)
            a_in.set()
            b_in.wait(1)  # B cannot come in while A decodes: the wait runs out
        a_out.set()

    def b():
        a_in.wait(5)
        with conv_precision():
            inside.append(torch.backends.cuda.matmul.allow_tf32)
            b_in.set()
            a_out.wait(5)

    cudnn = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = not start
    try:
        threads = [threading.Thread(target=a), threading.Thread(target=b)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        torch.backends.cudnn.allow_tf32 = cudnn
        end, torch.backends.cuda.matmul.allow_tf32 = torch.backends.cuda.matmul.allow_tf32, start
    assert inside == [not start, not start]
    assert end == start
