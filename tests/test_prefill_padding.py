"""Prefill into cache rows: prompts of different lengths, padded into one batch the way the runner
pads them (LocEnc on audio positions only, padding entries sent to the scratch row), give the same
states and cache rows as each prompt alone with every position through LocEnc, as the official
model computes it."""
import torch

from inference import Engine, SynthesisRequest
from inference.runtime.runner import Join
from tests.test_golden_parity import CKPT, GOLDEN


def alone(model, prompt, row: int):
    """The plain formulation: one prompt, unpadded, LocEnc over all of its positions."""
    n = len(prompt)
    embeds = model.embed_patches(prompt.patches[None])  # the plain ops
    state = model.prefill(prompt.tokens[None], prompt.text_mask[None], prompt.audio_mask[None], embeds,
                          prompt.patches[None, -1], last=torch.tensor([n - 1]), rows=torch.tensor([row]))
    return state, model.base_cache.k[:, row, :, :n].clone(), model.residual_cache.v[:, row, :, :n].clone()


def test_padded_batched_prefill_equals_each_prompt_alone():
    engine = Engine.from_pretrained(str(CKPT), device="cpu", dtype="float32", warmup=False, max_streams=4)
    model, runner = engine.model, engine.runner
    clip = str(GOLDEN / "clip_16k_mono.wav")
    prompts = [engine.first_prompt(SynthesisRequest(text="Hello world, padding check.", control="calm")),
               engine.first_prompt(SynthesisRequest(text="A cloned voice, with a reference in front.", reference_audio=clip)),
               engine.first_prompt(SynthesisRequest(text="and on it goes.", prompt_audio=clip, prompt_text="It starts"))]
    want = [alone(model, prompt, row=3) for prompt in prompts]
    joins = [Join(row, prompt, None, 10, 2.0) for row, prompt in zip((1, 0, 2), prompts)]
    length = 64 * ((max(len(p) for p in prompts) + 63) // 64)
    state = model.prefill(*runner._batch_inputs(joins, 4, length))  # the fourth entry is padding
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
