"""Prefill into cache rows: a prompt padded to a captured length, and prompts of different
lengths padded into one batch, give the same states and cache rows as each prompt alone."""
import torch

from inference import Engine, SynthesisRequest
from tests.test_golden_parity import CKPT


def padded(x, length, fill=0):
    out = torch.full((length, *x.shape[1:]), fill, dtype=x.dtype)
    out[: x.shape[0]] = x
    return out


def prompt_tensors(prompt, length, fill=0):
    return (padded(prompt.tokens, length, fill), padded(prompt.text_mask, length),
            padded(prompt.audio_mask, length), padded(prompt.patches, length, float(fill)))


def test_padded_batched_prefill_equals_each_prompt_alone():
    engine = Engine.from_pretrained(str(CKPT), device="cpu", dtype="float32", warmup=False, max_streams=4)
    model = engine.model
    prompts = [engine.prepare(SynthesisRequest(text="Hello world, padding check.", control="calm")),
               engine.prepare(SynthesisRequest(text="A second and rather longer prompt, to pad the first one."))]
    alone = []
    for prompt in prompts:
        n = len(prompt)
        state = model.prefill(*(t[None] for t in prompt_tensors(prompt, n)), last=torch.tensor([n - 1]),
                              rows=torch.tensor([3]))
        alone.append((state, model.base_cache.k[:, 3, :, :n].clone(), model.residual_cache.v[:, 3, :, :n].clone()))
    # Padding holds zeros in the real runner; ones here prove it cannot leak back. Rows 1 and 0.
    length = 64
    batch = [torch.stack(parts) for parts in zip(*(prompt_tensors(p, length, fill=1) for p in prompts))]
    state = model.prefill(*batch, last=torch.tensor([len(p) - 1 for p in prompts]), rows=torch.tensor([1, 0]))
    for i, (row, prompt) in enumerate(zip((1, 0), prompts)):
        want, want_k, want_v = alone[i]
        n = len(prompt)
        for got, exp in ((state.lm_hidden[i], want.lm_hidden[0]), (state.residual_hidden[i], want.residual_hidden[0]),
                         (state.prev_patch[i], want.prev_patch[0])):
            torch.testing.assert_close(got, exp, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(model.base_cache.k[:, row, :, :n], want_k, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(model.residual_cache.v[:, row, :, :n], want_v, rtol=1e-5, atol=1e-6)
