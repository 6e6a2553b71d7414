"""GPU behaviour of the fast path. Skipped without CUDA (CI); run on the device machine, outcome
recorded in bench/GPU_TESTS.md."""
import numpy as np
import pytest
import torch

from inference import Engine, SynthesisRequest
from inference.tiny import write_tiny_checkpoint

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

TEXT = "Hello world, this is a test of the graph path and we speak for a good long time today."


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return str(write_tiny_checkpoint(tmp_path_factory.mktemp("tiny") / "ckpt", seed=3))


@pytest.fixture(scope="module")
def graph_engine(ckpt):
    return Engine.from_pretrained(ckpt, device="cuda", dtype="bfloat16")


def fixed_noise(n, seed=0):
    return torch.randn(n, 64, 4, generator=torch.Generator().manual_seed(seed)).numpy()


def run_steps(engine, n=100, seed=0):
    req = SynthesisRequest(text=TEXT, noise=fixed_noise(n, seed), min_len=n, max_len=n)
    prompt = engine.prepare(req)
    noise = torch.from_numpy(fixed_noise(n, seed)).transpose(1, 2).contiguous()
    return list(engine.runner.run(prompt, noise, 2.0, 10, min_len=n, max_patches=n))


def test_graph_path_equals_eager_path_step_by_step(ckpt, graph_engine):
    eager = Engine.from_pretrained(ckpt, device="cuda", dtype="bfloat16", cuda_graphs=False)
    graph_steps, eager_steps = run_steps(graph_engine), run_steps(eager)
    assert len(graph_steps) == len(eager_steps) == 100
    assert [s[2] for s in graph_steps] == [s[2] for s in eager_steps], "stop decisions differ"
    errors = [np.linalg.norm(g[1] - e[1]) / np.linalg.norm(e[1]) for g, e in zip(graph_steps, eager_steps)]
    print(f"graph vs eager latents: max relative error {max(errors):.2e} over 100 patches")
    assert max(errors) < 1e-2


def snr_db(ref, x):
    return 10 * np.log10(np.sum(ref**2) / max(np.sum((ref - x) ** 2), 1e-30))


def test_streamed_audio_equals_whole_decode(graph_engine):
    chunks = list(graph_engine.stream(SynthesisRequest(text=TEXT, seed=4, min_len=30, max_len=30)))
    streamed = np.concatenate([c.audio for c in chunks])
    whole = graph_engine.decode_whole(np.stack([c.latents for c in chunks]))
    print(f"stream vs whole decode: SNR {snr_db(whole, streamed):.1f} dB")
    assert streamed.shape == whole.shape and snr_db(whole, streamed) > 40


def test_requests_do_not_leak_state(ckpt, graph_engine):
    first = SynthesisRequest(text="Good morning, warm voice.", seed=7, reference_audio=None, max_len=12)
    second = SynthesisRequest(text=TEXT, seed=8, min_len=20, max_len=20)
    graph_engine.synthesize(first)
    after_other = graph_engine.synthesize(second)
    fresh = Engine.from_pretrained(ckpt, device="cuda", dtype="bfloat16").synthesize(second)
    assert np.array_equal(after_other, fresh)


def test_no_memory_growth_over_50_requests(graph_engine):
    req = SynthesisRequest(text="Memory check.", seed=9, min_len=4, max_len=6)
    graph_engine.synthesize(req)
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    for i in range(50):
        graph_engine.synthesize(SynthesisRequest(text="Memory check.", seed=i, min_len=4, max_len=6))
    torch.cuda.synchronize()
    print(f"memory allocated before {before} after {torch.cuda.memory_allocated()} bytes")
    assert torch.cuda.memory_allocated() <= before


def test_200_start_and_cancel_cycles_hold_gpu_memory_flat(graph_engine):
    """Issue 5 on the fast path: streams abandoned after a patch or two (a closed tab), one after
    another, leave allocated and reserved GPU memory where they started; the next request is exact."""
    req = lambda seed: SynthesisRequest(text=TEXT, seed=seed, min_len=300, max_len=300)  # noqa: E731
    want = np.concatenate([c.audio for c in graph_engine.stream(SynthesisRequest(text=TEXT, seed=1, max_len=5))])
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated(), torch.cuda.memory_reserved()
    for i in range(200):
        stream = graph_engine.stream(req(i))
        for _ in range(1 + i % 2):
            next(stream)
        stream.close()
    torch.cuda.synchronize()
    after = torch.cuda.memory_allocated(), torch.cuda.memory_reserved()
    print(f"200 cancel cycles: allocated {before[0]} -> {after[0]} bytes, reserved {before[1]} -> {after[1]} bytes")
    assert after[0] <= before[0] and after[1] <= before[1]
    again = np.concatenate([c.audio for c in graph_engine.stream(SynthesisRequest(text=TEXT, seed=1, max_len=5))])
    assert np.array_equal(again, want)


def test_bf16_on_gpu_against_float32_golden():
    """Issue 2's figure: latent error of bf16 on the GPU against the official float32 on the CPU."""
    from tests.test_golden_parity import GOLDEN, _request, load_case

    engine = Engine.from_pretrained(str(GOLDEN / "ckpt"), device="cuda", dtype="bfloat16")
    for path in sorted(GOLDEN.glob("*.npz")):
        case = load_case(path)
        ours = np.stack([c.latents for c in engine.stream(_request(case))])
        ref = case["latents"]
        n = min(len(ours), len(ref))
        err = np.linalg.norm(ours[:n] - ref[:n]) / np.linalg.norm(ref[:n])
        print(f"{path.stem}: bf16 GPU vs float32 official latents rel error {err:.2e} "
              f"({len(ours)} vs {len(ref)} patches)")
        assert err < 0.1
