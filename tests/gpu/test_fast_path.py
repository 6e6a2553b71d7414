"""GPU behaviour of the fast path. Skipped without CUDA (CI); run on the device machine, outcome
recorded in docs/benchmarks.md ("Exactness on the GPU")."""
import numpy as np
import pytest
import torch

from inference import Engine, SynthesisRequest
from inference.model.tiny_checkpoint import write_tiny_checkpoint
from tests.support.app_helpers import decode_whole
from tests.unit.test_batching import staggered

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

TEXT = "Hello world, this is a test of the graph path and we speak for a good long time today."


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return str(write_tiny_checkpoint(tmp_path_factory.mktemp("tiny") / "ckpt", seed=3))


@pytest.fixture(scope="module")
def graph_engine(ckpt):
    return Engine.from_pretrained(ckpt, device="cuda", dtype="bfloat16", max_streams=16)


def fixed_noise(n, seed=0):
    return torch.randn(n, 64, 4, generator=torch.Generator().manual_seed(seed)).numpy()


def request(n=100, seed=0, **kw):
    return SynthesisRequest(text=TEXT, noise=fixed_noise(n, seed), min_len=n, max_len=n, **kw)


def relative(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def same_dit_functions(eager: Engine, graphs: Engine):
    """Each bucket of `eager` on the DiT functions `graphs`' warm-up chose for it. An engine
    without graphs times no choices and keeps cuBLAS; where the Hopper kernels won a bucket, the
    two engines would otherwise run different (each bf16-exact) products."""
    for b, name in graphs.runner.dit_chosen.items():
        eager.runner.step.run_dit_on(b, name)


def test_graph_path_equals_eager_path_step_by_step(ckpt, graph_engine):
    """The graphs replay the functions the eager path calls (the same DiT choice per bucket):
    same stop steps, same latents."""
    eager = Engine.from_pretrained(ckpt, device="cuda", dtype="bfloat16", cuda_graphs=False, max_streams=16)
    requests = [request(100, 0), request(60, 1, cfg_value=3.0), request(40, 2, inference_timesteps=5)]
    for label, joins in (("alone", None), ("batched", [0, 3, 7])):
        graph_runs = [list(graph_engine.stream(r)) for r in requests] if joins is None else \
            staggered(graph_engine, requests, joins)
        same_dit_functions(eager, graph_engine)
        eager_runs = [list(eager.stream(r)) for r in requests] if joins is None else staggered(eager, requests, joins)
        worst = 0.0
        for g, e in zip(graph_runs, eager_runs):
            assert [c.index for c in g] == [c.index for c in e], "stop decisions differ"
            worst = max(worst, relative(np.stack([c.latents for c in g]), np.stack([c.latents for c in e])))
        print(f"graph vs eager latents, {label}: max relative error {worst:.2e}")
        assert worst < 1e-2


def test_batched_requests_equal_themselves_alone_in_bf16(graph_engine):
    """Joins and leaves at different steps, every bucket up to 16 rows, mixed cfg, timesteps and
    lengths: the same stop step, and latents within a bf16 bound of the request run alone (GEMM
    tiling differs by batch size)."""
    rng = np.random.default_rng(0)
    requests = [request(int(rng.integers(20, 80)), seed, cfg_value=float(rng.choice([1.5, 2.0, 3.0])),
                        inference_timesteps=int(rng.choice([6, 10, 12]))) for seed in range(20)]
    want = [list(graph_engine.stream(r)) for r in requests]
    got = staggered(graph_engine, requests, joins_at=[0] * 8 + list(range(2, 24)))
    errors = []
    for g, w in zip(got, want):
        assert [c.index for c in g] == [c.index for c in w], "a stop step moved"
        errors.append(relative(np.stack([c.latents for c in g]), np.stack([c.latents for c in w])))
    print(f"batched vs alone (bf16, graphs): latents relative error median {np.median(errors):.2e}, "
          f"max {max(errors):.2e} over {len(errors)} requests")
    assert max(errors) < 5e-2


def snr_db(ref, x):
    return 10 * np.log10(np.sum(ref**2) / max(np.sum((ref - x) ** 2), 1e-30))


def test_streamed_audio_equals_whole_decode(graph_engine):
    chunks = list(graph_engine.stream(SynthesisRequest(text=TEXT, seed=4, min_len=30, max_len=30)))
    streamed = np.concatenate([c.audio for c in chunks])
    whole = decode_whole(graph_engine, np.stack([c.latents for c in chunks]))
    print(f"stream vs whole decode: SNR {snr_db(whole, streamed):.1f} dB")
    assert streamed.shape == whole.shape and snr_db(whole, streamed) > 40


def test_the_graphs_int16_samples_are_the_bytes_the_doors_would_make(graph_engine):
    """The int16 samples the step's graph makes beside the audio (decode_step.int16_samples), at
    several rows at once: to_pcm's bytes of the same audio, so a door sends them as they are."""
    from ui.services.audio import to_pcm

    requests = [SynthesisRequest(text=TEXT, seed=seed, min_len=12, max_len=12) for seed in range(6)]
    for chunks in staggered(graph_engine, requests, joins_at=[0, 0, 0, 2, 3, 5]):
        for c in chunks:
            assert c.pcm == to_pcm(c.audio), f"chunk {c.index}"


def test_the_graphs_half_rate_patches_are_soxrs_resample_of_what_is_heard(graph_engine):
    """The patches at half the rate the step's graph makes (decode_step.halve, every row at once,
    pauses and segments among them), put together as a listener at 24 kHz gets them
    (listener.Halved): soxr's streaming resampler's samples of the 48 kHz stream, to float rounding."""
    from inference.request.listener import Output
    from ui.services.audio import to_pcm

    text = "[pause 100ms] " + TEXT + " [pause 200ms] So it is."
    requests = [SynthesisRequest(text=text, seed=seed, min_len=6, max_len=8) for seed in range(6)]
    for chunks in staggered(graph_engine, requests, joins_at=[0, 0, 0, 2, 3, 5]):
        ours, theirs = Output(1.0, 48000, 24000, True), Output(1.0, 48000, 24000)
        a = [ours.hear(c) for c in chunks] + [ours.end()]
        b = np.concatenate([theirs.hear(c)[0] for c in chunks] + [theirs.end()[0]])
        assert all(p == to_pcm(x) for x, p in a), "the graph's int16 are its samples' as the doors round"
        a = np.concatenate([x for x, _ in a])
        assert len(a) == len(b) and np.max(np.abs(a - b)) < 1e-5


def test_requests_do_not_leak_state(ckpt, graph_engine):
    first = SynthesisRequest(text="Good morning, warm voice.", seed=7, max_len=12)
    second = SynthesisRequest(text=TEXT, seed=8, min_len=20, max_len=20)
    graph_engine.synthesize(first)
    after_other = graph_engine.synthesize(second)
    fresh = Engine.from_pretrained(ckpt, device="cuda", dtype="bfloat16", max_streams=16).synthesize(second)
    assert np.array_equal(after_other, fresh)


def test_200_join_and_cancel_cycles_hold_gpu_memory_flat(graph_engine):
    """Streams join a running batch and are abandoned after a patch or two (a closed tab), 200
    times, while two long streams run on: allocated and reserved GPU memory stay where they
    started, and the next request is exact."""
    req = lambda seed, n=300: SynthesisRequest(text=TEXT, seed=seed, min_len=n, max_len=n)  # noqa: E731
    want = graph_engine.synthesize(req(1, 5))
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated(), torch.cuda.memory_reserved()
    keep = [graph_engine.start(req(10_000 + i, 400)) for i in range(2)]
    for i in range(200):
        stream, made = graph_engine.start(req(i)), 0
        while made < 1 + i % 2:
            made += sum(len(chunks) for s, chunks in graph_engine.step() if s is stream)
        graph_engine.stop(stream)
    for stream in keep:
        graph_engine.stop(stream)
    torch.cuda.synchronize()
    after = torch.cuda.memory_allocated(), torch.cuda.memory_reserved()
    print(f"200 join/cancel cycles: allocated {before[0]} -> {after[0]} bytes, reserved {before[1]} -> {after[1]} bytes")
    assert after[0] <= before[0] and after[1] <= before[1]
    assert np.array_equal(graph_engine.synthesize(req(1, 5)), want)


def test_a_full_batch_runs_in_the_largest_bucket(graph_engine):
    rows = graph_engine.rows
    streams = [graph_engine.start(SynthesisRequest(text=TEXT, seed=s, min_len=6, max_len=6)) for s in range(rows)]
    assert graph_engine.free_rows == 0
    got = {}
    while graph_engine.scheduler.active:
        for s, chunks in graph_engine.step():
            got.setdefault(s, []).extend(chunks)
    assert all(len(got[s]) == 6 and s.error is None for s in streams)
    alone = list(graph_engine.stream(SynthesisRequest(text=TEXT, seed=rows - 1, min_len=6, max_len=6)))
    err = relative(np.stack([c.latents for c in got[streams[-1]]]), np.stack([c.latents for c in alone]))
    print(f"full batch of {rows}: last row vs alone, latents relative error {err:.2e}")
    assert err < 5e-2


def test_bf16_on_gpu_against_float32_golden():
    """Issue 2's figure: latent error of bf16 on the GPU against the official float32 on the CPU."""
    from tests.unit.test_golden_parity import GOLDEN, _request, load_case

    engine = Engine.from_pretrained(str(GOLDEN / "ckpt"), device="cuda", dtype="bfloat16", max_streams=4)
    for path in sorted(GOLDEN.glob("*.npz")):
        case = load_case(path)
        ours = np.stack([c.latents for c in engine.stream(_request(case))])
        ref = case["latents"]
        n = min(len(ours), len(ref))
        err = np.linalg.norm(ours[:n] - ref[:n]) / np.linalg.norm(ref[:n])
        print(f"{path.stem}: bf16 GPU vs float32 official latents rel error {err:.2e} "
              f"({len(ours)} vs {len(ref)} patches)")
        assert err < 0.1
