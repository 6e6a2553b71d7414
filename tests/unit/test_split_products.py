"""The kernel decoder's split products (vae_stream.tf32_split, vae_kernel_stream.Products): the
split is exact, three TF32 products reach float32's accuracy where one TF32 product does not
(TF32 emulated by the same rounding on the CPU), the decode through the split path equals the
reference layers, and the weights' halves are made once and again after a weight changes."""
import copy
import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402

from inference.model import vae_kernel_stream  # noqa: E402
from inference.model.vae_kernel_stream import Products  # noqa: E402
from inference.model.vae_stream import tf32_split  # noqa: E402
from tests.unit.test_vae_stream import TINY, latents, randomized, rel_err  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.fixture
def tf32_on():
    """The policy flag the products read (on the CPU only a flag: its matmuls stay float32)."""
    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


def tf32(t):
    return tf32_split(t)[0]


def test_the_split_is_exact_and_hi_fits_tf32():
    t = torch.randn(4096, generator=torch.Generator().manual_seed(0)) * torch.logspace(-20, 20, 4096)
    hi, lo = tf32_split(t)
    assert torch.equal(hi + lo, t)
    assert (hi.view(torch.int32) & 0x1FFF).eq(0).all()  # 10 mantissa bits left
    assert (lo.abs() <= hi.abs() * 2.0 ** -11).all()  # rounded to nearest: half a TF32 step at most
    assert torch.equal(tf32_split(-t)[0], -hi)  # symmetric in sign


def test_three_tf32_products_reach_float32_accuracy_where_one_does_not():
    gen = torch.Generator().manual_seed(1)
    a, w = torch.randn(256, 512, generator=gen), torch.randn(512, 128, generator=gen)
    exact = a.double() @ w.double()
    (a_hi, a_lo), (w_hi, w_lo) = tf32_split(a), tf32_split(w)
    one = (tf32(a) @ tf32(w)).double()  # what a tensor core computes from float32 inputs
    three = (tf32(a_lo) @ w_hi + a_hi @ tf32(w_lo) + a_hi @ w_hi).double()  # Products.mm's terms
    plain = (a @ w).double()
    assert rel_err(one, exact) > 1e-4
    assert rel_err(three, exact) < 3 * rel_err(plain, exact) + 1e-7


def test_products_keep_one_split_per_weight(tf32_on):
    products, w = Products(precise=True), torch.randn(8, 4)
    first = products.weight_halves(w)
    assert products.weight_halves(w)[0] is first[0] and torch.equal(first[0] + first[1], w)
    replaced = w * 2  # a weight moved or loaded anew is another tensor: its own split
    second = products.weight_halves(replaced)
    assert torch.equal(second[0] + second[1], replaced) and products.weight_halves(w)[0] is first[0]
    a = torch.randn(3, 8)
    torch.testing.assert_close(products.mm(a, w, lambda v: v), a @ w, rtol=1e-6, atol=1e-6)
    out = torch.ones(3, 4)
    torch.testing.assert_close(products.mm(a, w, lambda v: v, out=out), 1 + a @ w, rtol=1e-6, atol=1e-6)
    with torch.inference_mode():  # weights loaded under inference mode (bench.lab.profile_step's)
        frozen = torch.randn(8, 4)
    torch.testing.assert_close(products.mm(a, frozen, lambda v: v), a @ frozen, rtol=1e-6, atol=1e-6)
    assert products.weight_halves(frozen)[0] is products.weight_halves(frozen)[0]
    assert Products(precise=False).dot_precision(torch.float32) == "tf32"
    assert products.dot_precision(torch.float32) == "tf32x3" and not products.split(torch.bfloat16)


@pytest.mark.parametrize("frames", [2, 50], ids=["weight-bound-stacked", "three-products"])
def test_both_orders_of_the_split_products_equal_one_float32_product(tf32_on, frames):
    """Few frames against a bigger weight take w_hi's two products as one stacked product."""
    products, w, a = Products(precise=True), torch.randn(16, 24), torch.randn(frames, 16)
    assert (w.numel() > a.numel()) == (frames == 2)
    assert_float32_product(products.mm(a, w, lambda v: v), a, w)
    out = torch.randn(frames, 24)
    before = out.clone()
    got = products.mm(a, w, lambda v: v, out=out)
    assert got.data_ptr() == out.data_ptr()
    assert_float32_product(got, a, w, before)


def assert_float32_product(got, a, w, add=None):
    """`got` is (add +) a @ w to float32's own accuracy: within the standard bound of a k-term float32
    sum, k·eps·(|a| @ |w| + |add|), of the product taken in float64. A fixed 1e-6 failed on an H100
    machine's CPU, whose BLAS rounds the same float32 product differently; a lost low half of the
    split weight (about 2^-11 of it) would still be 10x outside this bound."""
    a64, w64 = a.double(), w.double()
    want = a64 @ w64 + (0 if add is None else add.double())
    scale = a64.abs() @ w64.abs() + (0 if add is None else add.double().abs())
    bound = a.shape[1] * torch.finfo(torch.float32).eps * scale
    worst = ((got.double() - want).abs() / bound).max().item()
    assert worst <= 1, f"off by {worst:.2f} times float32's bound"


def test_the_split_decode_equals_the_reference_layers(tf32_on):
    """Every product split (cuBLAS and tl.dot); on CUDA the reference runs with TF32 off."""
    model = randomized(TINY).to(DEVICE)
    fast = copy.deepcopy(model)
    fast.decoder.compile_stream(split_blocks=99)
    assert isinstance(fast.decoder.stream_impl, vae_kernel_stream.KernelStream)
    z = latents(2, 12, 7).to(DEVICE)
    state = fast.new_decoder_state(2)
    with torch.no_grad():
        got = torch.cat([fast.decode_chunk(z[..., a: a + 4], state) for a in (0, 4, 8)], dim=-1)
        torch.backends.cudnn.allow_tf32 = False
        whole = model.decode(z)
    assert rel_err(got, whole) < 1e-5
    copied = copy.deepcopy(fast)
    assert copied.decoder.stream_impl is not fast.decoder.stream_impl
    assert len(copied.decoder.stream_impl.precise.halves) == 0 and copied.decoder.stream_impl.split_blocks == 99


@pytest.mark.skipif(not torch.cuda.is_available(), reason="TF32 rounding happens on CUDA tensor cores")
def test_on_cuda_split_products_beat_plain_tf32(tf32_on):
    model = randomized(TINY).cuda()
    z = latents(2, 12, 8).cuda()
    outs = {}
    for precise in (True, False):
        fast = copy.deepcopy(model)
        fast.decoder.compile_stream(split_blocks=99 if precise else 0)
        state = fast.new_decoder_state(2)
        with torch.no_grad():
            outs[precise] = torch.cat([fast.decode_chunk(z[..., a: a + 4], state) for a in (0, 4, 8)], dim=-1)
    torch.backends.cudnn.allow_tf32 = False
    with torch.no_grad():
        whole = model.decode(z)
    assert rel_err(outs[True], whole) < 1e-5 < rel_err(outs[False], whole)


def test_split_blocks_choose_which_layers_split(tf32_on, monkeypatch):
    """split_blocks=1: the head's product and the first block's (its transposed convolution and its
    three residual units) are split, the five later blocks' are plain."""
    model = randomized(TINY).to(DEVICE)
    model.decoder.compile_stream(split_blocks=1)
    stream = model.decoder.stream_impl
    calls = {"precise": [], "plain": []}
    for name in calls:
        products = getattr(stream, name)
        real_mm, real_dot = products.mm, products.dot_precision
        monkeypatch.setattr(products, "mm", lambda *a, real=real_mm, n=name, **k: (calls[n].append("mm"), real(*a, **k))[1])
        monkeypatch.setattr(products, "dot_precision",
                            lambda dtype, real=real_dot, n=name: (calls[n].append("dot"), real(dtype))[1])
    with torch.no_grad():
        model.decode_chunk(latents(1, 4, 9).to(DEVICE), model.new_decoder_state(1))
    assert sorted(calls["precise"]) == ["dot"] * 3 + ["mm"] * 2
    assert sorted(calls["plain"]) == ["dot"] * 15 + ["mm"] * 5
    assert stream.precise.dot_precision(torch.float32) == "tf32x3" and stream.plain.dot_precision(torch.float32) == "tf32"
