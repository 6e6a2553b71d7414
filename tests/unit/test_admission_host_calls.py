"""A request's way onto the GPU is a few PyTorch calls on the engine's thread, however many
requests join at once. Each call lets go of the GIL and takes it back, and while the event loop
takes in a burst of requests taking it back can cost a millisecond (docs/benchmarks.md, "Where a
served burst's first audio goes"): the engine's thread then crawls exactly when a burst arrives.
Counted with a TorchFunctionMode around the calls, on the tiny model: the code the GPU runs, where
a function it replays from a CUDA graph counts as the one call its replay is."""
from __future__ import annotations

import collections
import dataclasses
import contextlib

import pytest
import torch
from torch.overrides import TorchFunctionMode

from inference import Engine, SynthesisRequest
from inference.runtime.cuda_graphs import CUDAGraphed
from inference.runtime.decode_step import DecodeStep, Join
from inference.request.continuation import DecoderStart
from tests.unit.test_golden_parity import CKPT, GOLDEN

# Reads of a tensor's host data or metadata: no trip through the GIL.
HOST_ONLY = {"numpy", "__get__", "__len__"}


class Calls(TorchFunctionMode):
    """The PyTorch calls made inside it (not those they make in turn), by name."""

    def __init__(self):
        super().__init__()
        self.names: collections.Counter[str] = collections.Counter()
        self.paused = False

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", str(func))
        if name not in HOST_ONLY and not self.paused:
            self.names[name] += 1
        return func(*args, **(kwargs or {}))

    @property
    def total(self) -> int:
        return sum(self.names.values())


def counted_once(cls, method: str, name: str, monkeypatch):
    run = getattr(cls, method)

    def once(*args, **kwargs):
        calls = active[-1] if active else None
        if calls is None:
            return run(*args, **kwargs)
        calls.names[name] += 1
        calls.paused = True
        try:
            return run(*args, **kwargs)
        finally:
            calls.paused = False
    monkeypatch.setattr(cls, method, once)


@pytest.fixture(autouse=True)
def as_on_the_gpu(monkeypatch):
    """On the CPU a graphed function runs eagerly: it is counted as the one call it is on the GPU,
    a replay (the prompts' LocEnc is one too)."""
    counted_once(CUDAGraphed, "__call__", "<graph replay>", monkeypatch)


active: list[Calls] = []  # the counting under way, if any


@contextlib.contextmanager
def counting():
    calls = Calls()
    active.append(calls)
    try:
        with calls:
            yield calls
    finally:
        active.clear()


def engine(rows: int = 32) -> Engine:
    return Engine.from_pretrained(str(CKPT), device="cpu", dtype="float32", warmup=False, max_streams=rows)


def joins(e: Engine, requests: list[SynthesisRequest]) -> list[Join]:
    plans = [e.preparer.plan(req) for req in requests]
    return [Join(row, p.start.prompt, p.start.noise, p.req.inference_timesteps, float(p.req.cfg_value))
            for row, p in enumerate(plans)]


def admitted(e: Engine, group: list[Join]) -> Calls:
    with torch.inference_mode(), counting() as calls:
        e.runner.admit(group)
    return calls


def test_admitting_sixteen_requests_takes_as_few_torch_calls_as_admitting_one():
    e = engine()
    design = [SynthesisRequest(text=f"Request number {i} joins.", control="calm", seed=i) for i in range(16)]
    admitted(e, joins(e, design[:1]))  # the Euler schedule is built on first use
    one, sixteen = admitted(e, joins(e, design[:1])), admitted(e, joins(e, design))
    print("one:", dict(one.names), "sixteen:", dict(sixteen.names))
    assert one.total <= 24, one.names  # was 46 (55 on CUDA): each input built, pinned and copied on its own
    assert sixteen.total == one.total, (one.names, sixteen.names)  # was 196: ten more per prompt


def test_a_cloning_request_adds_only_its_clips_locenc_to_the_admission():
    e = engine()
    clip = str(GOLDEN / "clip_16k_mono.wav")
    design = SynthesisRequest(text="A designed voice.", control="calm", seed=1)
    cloned = SynthesisRequest(text="A cloned voice.", reference_audio=clip, seed=2)
    admitted(e, joins(e, [design, cloned]))  # first use: schedule built, LocEnc traced
    alone, both = admitted(e, joins(e, [design])), admitted(e, joins(e, [design, cloned]))
    added = both.total - alone.total
    assert 0 < added <= 12, (alone.names, both.names)  # the clip's patches and places up, LocEnc's replay, one write


def planned(e: Engine, prepared) -> Calls:
    with torch.inference_mode(), counting() as calls:
        e.preparer.plan(prepared)
    return calls


def test_starting_a_request_makes_one_torch_call_its_noise_in_every_mode():
    """Engine.start runs on the engine's thread once per request: a burst of 64 is 64 of them
    back to back while the event loop takes the burst in. Its prompt is built on the host
    without PyTorch; the one call left is the seeded noise's draw (torch's generator is what a
    seed means)."""
    e = engine()
    clip = prompt_clip = str(GOLDEN / "clip_16k_mono.wav")
    requests = {
        "design": SynthesisRequest(text="A designed voice, speaking now.", control="calm", seed=1),
        "cloning": SynthesisRequest(text="A cloned voice.", reference_audio=clip, control="happy", seed=2),
        "ultimate": SynthesisRequest(text="And it goes on.", prompt_audio=prompt_clip,
                                     prompt_text="This is the clip.", seed=3),
        "both": SynthesisRequest(text="And it goes on.", reference_audio=clip, prompt_audio=prompt_clip,
                                 prompt_text="This is the clip.", seed=4),
    }
    for mode, req in requests.items():
        prepared = e.prepare(req)
        encoded = {side: None if host is None else dataclasses.replace(host, patches=e.preparer.encode_clip(host))
                   for side, host in (("reference", prepared.reference), ("prompt", prepared.prompt))}
        prepared = dataclasses.replace(prepared, **encoded)  # as a saved voice's are, or a group's together
        calls = planned(e, prepared)
        assert calls.total <= 1, (mode, dict(calls.names))  # was 9: the prompt's tensors built one by one


def test_a_patch_at_the_default_timesteps_is_two_graph_replays_and_one_copy_home():
    """Every step launches a patch on the engine's thread, so its calls are paid once a step, by
    every stream: at the default timesteps the noise and its Euler steps are one graph (not a
    replay per Euler step), the stop flags, audio and LM step another, then the one copy home."""
    e = engine()
    plan = e.preparer.plan(SynthesisRequest(text="One patch at a time.", control="calm", seed=1))
    e.runner.admit([Join(0, plan.start.prompt, plan.start.noise, plan.req.inference_timesteps, 2.0)])
    with torch.inference_mode(), counting() as calls:
        e.runner.launch(1, len(plan.start.prompt), DecodeStep.iterations(plan.req.inference_timesteps))
    assert calls.names["<graph replay>"] == 2 and calls.total <= 3, dict(calls.names)  # was 11 replays and 4 copies
    with torch.inference_mode(), counting() as calls:  # other timesteps: a replay per Euler step
        e.runner.launch(1, len(plan.start.prompt) + 1, DecodeStep.iterations(4))
    assert calls.names["<graph replay>"] == 2 + DecodeStep.iterations(4), dict(calls.names)


def test_admitting_sixteen_next_segments_takes_as_few_torch_calls_as_admitting_one():
    """A live session's every clause after the first, and a long text's every segment, enters its
    row with the decoder state its last segment left (DecoderStart.CARRY): at 128 live sessions
    the seams come together, and the states are loaded in a few batched copies however many join."""
    e = engine()
    design = [SynthesisRequest(text=f"Request number {i} goes on.", control="calm", seed=i) for i in range(16)]

    def carried(group: list[Join]) -> list[Join]:
        return [dataclasses.replace(j, decoder=DecoderStart.CARRY, quiet=bool(j.row % 2)) for j in group]
    admitted(e, carried(joins(e, design[:1])))  # the Euler schedule is built on first use
    one, sixteen = admitted(e, carried(joins(e, design[:1]))), admitted(e, carried(joins(e, design)))
    assert sixteen.total <= one.total + 4, (one.names, sixteen.names)  # was 4 more a segment
