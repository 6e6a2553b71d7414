"""Prefill into cache rows: prompts of different lengths, padded into one batch the way the runner
pads them (LocEnc on audio positions only, padding entries sent to the scratch row), give the same
states and cache rows as each prompt alone with every position through LocEnc, as the official
model computes it."""
import pytest
import torch

from inference import Engine, SynthesisRequest
from inference.runtime.decode_step import Join
from tests.support.app_helpers import first_prompt
from tests.unit.test_golden_parity import CKPT, GOLDEN


def alone(model, prompt, row: int):
    """The plain formulation: one prompt, unpadded, LocEnc over all of its positions."""
    n = len(prompt)
    embeds = model.embed_patches(prompt.patches[None])  # the plain ops
    state = model.prefill(prompt.tokens[None], prompt.text_mask[None], prompt.audio_mask[None], embeds,
                          prompt.patches[None, -1], last=torch.tensor([n - 1]), rows=torch.tensor([row]))
    return state, model.base_cache.k[:, row, :, :n].clone(), model.residual_cache.v[:, row, :, :n].clone()


@pytest.mark.parametrize("turn", [None, 16], ids=["one LocEnc graph", "LocEnc in turns of 16 patches"])
def test_padded_batched_prefill_equals_each_prompt_alone(turn, monkeypatch):
    """The prompts' audio patches (here 30-odd) go through LocEnc padded to a graph's bucket, and
    in turns when they are more than one graph holds: no patch sees another, so neither changes
    what a prompt gets."""
    from inference.runtime import runner as runner_module

    if turn is not None:
        monkeypatch.setattr(runner_module, "EMBED_PATCHES", turn)
    engine = Engine.from_pretrained(str(CKPT), device="cpu", dtype="float32", warmup=False, max_streams=4)
    model, runner = engine.model, engine.runner
    clip = str(GOLDEN / "clip_16k_mono.wav")
    prompts = [first_prompt(engine, SynthesisRequest(text="Hello world, padding check.", control="calm")),
               first_prompt(engine, SynthesisRequest(text="A cloned voice, with a reference in front.", reference_audio=clip)),
               first_prompt(engine, SynthesisRequest(text="and on it goes.", prompt_audio=clip, prompt_text="It starts"))]
    want = [alone(model, prompt, row=3) for prompt in prompts]
    joins = [Join(row, prompt, None, 10, 2.0) for row, prompt in zip((1, 0, 2), prompts)]
    length = 64 * ((max(len(p) for p in prompts) + 63) // 64)
    state = model.prefill(*runner._batch_inputs(joins, 4, length)[:7])  # the fourth entry is padding
    for i, (join, prompt) in enumerate(zip(joins, prompts)):
        exp, exp_k, exp_v = want[i]
        n = len(prompt)
        for got, ref in ((state.lm_hidden[i], exp.lm_hidden[0]), (state.residual_hidden[i], exp.residual_hidden[0]),
                         (state.prev_patch[i], exp.prev_patch[0])):
            torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(model.base_cache.k[:, join.row, :, :n], exp_k, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(model.residual_cache.v[:, join.row, :, :n], exp_v, rtol=1e-5, atol=1e-6)


def test_large_batches_pad_to_the_nearer_of_a_power_of_two_and_one_and_a_half_times_it():
    from inference.runtime.runner import PREFILL_TOKENS, prefill_keys

    keys = prefill_keys([1, 8, 16, 64, 128], capacity=8192)
    assert all(k * length <= PREFILL_TOKENS for k, length in keys)
    assert [length for k, length in keys if k == 8] == [32, 64, 128, 256, 512, 1024]  # launch-bound: powers of two
    assert [length for k, length in keys if k == 64] == [32, 48, 64, 96, 128]
    assert [length for k, length in keys if k == 128] == [32, 48, 64]
    engine = Engine.from_pretrained(str(CKPT), device="cpu", dtype="float32", warmup=False, max_streams=64)
    assert engine.runner.prefill_key(64, 80) == (64, 96)  # was (64, 128): 37% of it padding
    assert engine.runner.prefill_key(40, 60) == (64, 64) and engine.runner.prefill_key(4, 40) == (4, 64)


def test_the_compiled_prefill_equals_the_plain_one_and_one_graph_serves_every_batch_and_length():
    """On the CPU too: torch.compile's C++ backend fuses the same functions the GPU's Triton does."""
    from inference.runtime.compiled import prefill_ops

    engine = Engine.from_pretrained(str(CKPT), device="cpu", dtype="float32", warmup=False, max_streams=4)
    model, ops = engine.model, prefill_ops(backends=None)
    torch._dynamo.utils.counters.clear()
    graphs = []
    with torch.inference_mode():
        for b, length in [(2, 32), (4, 48), (3, 96), (4, 64)]:
            gen = torch.Generator().manual_seed(b * length)
            tokens = torch.randint(3, 60, (b, length), generator=gen)
            audio = (torch.rand(b, length, generator=gen) < 0.3).float()
            embeds = torch.randn(b, length, model.cfg.base_lm.hidden_size, generator=gen) * audio[..., None]
            args = (tokens, 1 - audio, audio, embeds, torch.randn(b, 4, 64, generator=gen),
                    torch.randint(length // 2, length, (b,), generator=gen), torch.arange(b))
            plain, compiled = model.prefill(*args), model.prefill(*args, ops)
            for got, want in ((compiled.lm_hidden, plain.lm_hidden), (compiled.residual_hidden, plain.residual_hidden)):
                torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
            graphs.append(torch._dynamo.utils.counters["stats"]["unique_graphs"])
    assert graphs[0] > 0 and graphs[1:] == graphs[:1] * 3, f"graphs compiled after each shape: {graphs}"


def test_load_rows_writes_each_entering_row_and_leaves_the_others():
    engine = Engine.from_pretrained(str(CKPT), device="cpu", dtype="float32", warmup=False, max_streams=4)
    step = engine.runner.step
    prompt = first_prompt(engine, SynthesisRequest(text="Rows in one go."))
    step.noise.fill_(7.0)
    step.decoder.flat.fill_(3.0)
    gen = torch.Generator().manual_seed(0)
    joins = [Join(2, prompt, torch.randn(5, 4, 64, generator=gen), 10, 2.5),
             Join(0, prompt, torch.randn(3, 4, 64, generator=gen), 6, 1.5)]
    step.load_rows(joins, torch.tensor([j.row for j in joins]), torch.tensor([j.cfg_value for j in joins]))
    for j in joins:
        n = len(j.noise)
        torch.testing.assert_close(step.noise[j.row, :n], j.noise)
        assert torch.all(step.noise[j.row, n:5] == 0) and torch.all(step.noise[j.row, 5:] == 7.0)
        time, dt = step.schedule(j.steps)
        assert torch.equal(step.time_rows[j.row], time) and torch.equal(step.dt_rows[j.row], dt)
        assert step.cfg_value[j.row].item() == j.cfg_value
        assert torch.all(step.decoder.flat[j.row] == 0)  # fresh: back to silence
    for untouched in (1, 3):
        assert torch.all(step.noise[untouched] == 7.0) and torch.all(step.decoder.flat[untouched] == 3.0)
