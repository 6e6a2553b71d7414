"""The step's functions are built at one place and passed in, never swapped into the modules:
compile off gives the plain ones on the same call path, a patch calls the model through the
bundle its DecodeStep holds, and a compiled bundle raises dynamo's recompile limit only inside
its scope, on its own thread. The scheduler tells the runner what it launched past a segment's
end instead of rewriting the continuation's answer."""
from __future__ import annotations

import collections
import dataclasses
import threading

import numpy as np
import pytest
import torch

from inference import Engine, SynthesisRequest
from inference.model.loader import load_checkpoint
from inference.request.listener import Listener
from inference.model.locdit import LocDiT, guided_euler
from inference.model.transformer import PLAIN_OPS, LayerOps, Transformer, attention_inputs, decode_attention
from inference.request.continuation import DecoderStart
from inference.runtime.compiled import PLAIN, StepFunctions, step_functions
from inference.runtime.prepare import RequestPreparer
from inference.runtime.runner import BatchRunner
from inference.runtime.scheduler import Scheduler
from inference.runtime.stream import Stream
from tests.unit.test_golden_parity import CKPT

TEXT = "Hello world, the step functions are passed in."


@pytest.fixture(scope="module")
def engine():
    return Engine.from_pretrained(str(CKPT), device="cpu", dtype="float32", warmup=False, max_streams=2)


def test_compile_off_is_the_plain_functions_and_no_module_carries_a_swapped_attribute(engine):
    assert engine.runner.step.fns is PLAIN and not PLAIN.compiled
    assert PLAIN.ops is PLAIN_OPS and PLAIN.guided_euler is guided_euler
    limit = torch._dynamo.config.recompile_limit
    engine.synthesize(SynthesisRequest(TEXT, seed=1, min_len=2, max_len=2))
    for transformer in engine.model.transformers():
        assert isinstance(transformer, Transformer) and not hasattr(transformer, "ops")
    assert isinstance(engine.model.dit, LocDiT) and not hasattr(engine.model.dit, "guided_euler")
    assert torch._dynamo.config.recompile_limit == limit


def recording(calls: collections.Counter) -> StepFunctions:
    """The plain functions, each counting its calls."""
    def counted(name, fn):
        def call(*args):
            calls[name] += 1
            return fn(*args)
        return call
    def bundle(prefix: str) -> LayerOps:
        return LayerOps(**{f.name: counted(prefix + f.name, getattr(PLAIN_OPS, f.name)) for f in dataclasses.fields(LayerOps)})
    return StepFunctions(bundle(""), counted("guided_euler", guided_euler), prefill=bundle("prefill."))


def test_a_patch_calls_the_model_through_the_functions_its_step_holds(engine):
    """The engine's parts composed with a counting bundle: the prefill goes through its own
    functions, every per-patch model call through the step's, and the audio is the engine's."""
    req = SynthesisRequest(TEXT, seed=2, min_len=3, max_len=3)
    want = engine.synthesize(req)
    loaded, calls = load_checkpoint(str(CKPT), device="cpu", dtype="float32"), collections.Counter()
    runner = BatchRunner(loaded.model, loaded.vae, 1, recording(calls))
    scheduler, preparer = Scheduler(runner, 1), RequestPreparer(loaded, 60.0, 20000)
    stream = Stream(0, req.min_len, 1, runner.step.iterations(req.inference_timesteps), Listener(req.speed, 48000))
    scheduler.add(stream, preparer.plan(req))
    chunks = []
    cfg = loaded.cfg
    with torch.inference_mode():
        scheduler.admit()  # voice design: no audio position reaches LocEnc
        layers = cfg.base_lm.num_layers + cfg.residual_lm.num_layers
        assert calls == {"prefill.attention_inputs": layers, "prefill.sequence_attention": layers,
                         "prefill.layer_output": layers, "prefill.norm": 2}
        calls.clear()
        scheduler.launch(scheduler.schedule())
        assert calls["decode_attention"] == cfg.base_lm.num_layers + cfg.residual_lm.num_layers
        assert calls["guided_euler"] == stream.iterations
        dit_calls = stream.iterations * cfg.local_dit.num_layers
        assert calls["sequence_attention"] == cfg.local_encoder.num_layers + dit_calls
        while not stream.done:
            chunks += [c for s, made in scheduler.step() if s is stream for c in made]
    np.testing.assert_array_equal(np.concatenate([c.audio for c in chunks]), want)


def test_a_compiled_bundle_raises_the_recompile_limit_only_in_its_scope_and_thread():
    fns = step_functions(compile=True)  # torch.compile only wraps here: nothing compiles on the CPU
    assert fns.compiled and fns.ops.attention_inputs is not attention_inputs
    assert fns.ops.decode_attention is decode_attention and fns.guided_euler is not guided_euler
    outside, seen = torch._dynamo.config.recompile_limit, []
    with fns.scope:
        with fns.scope:  # one reusable scope, entered again within itself
            assert torch._dynamo.config.recompile_limit >= 64
        thread = threading.Thread(target=lambda: seen.append(torch._dynamo.config.recompile_limit))
        thread.start()
        thread.join()
        assert torch._dynamo.config.recompile_limit >= 64
    assert seen == [outside] and torch._dynamo.config.recompile_limit == outside


def test_the_next_segment_carries_the_decoder_and_the_scheduler_says_what_ran_past_its_end(engine, monkeypatch):
    joins, real = [], engine.runner.admit
    monkeypatch.setattr(engine.runner, "admit", lambda batch: joins.extend(batch) or real(batch))
    kept, keep = [], engine.runner.step.keep_end
    monkeypatch.setattr(engine.runner.step, "keep_end", lambda row, overrun: kept.append(overrun) or keep(row, overrun))
    monkeypatch.setattr(engine.preparer, "segment_weight", 40)
    text = "The quick brown fox jumps over the dog. It was a sunny day in May. Then the rain came down hard."
    stream = engine.start(SynthesisRequest(text=text, seed=3))
    starts = [stream.plan.start]
    while not stream.done:
        engine.step()
        if stream.plan.start is not starts[-1]:
            starts.append(stream.plan.start)
    assert stream.error is None and len(joins) == len(starts) == 3
    assert [j.decoder for j in joins] == [s.decoder for s in starts] == [DecoderStart.FRESH] + [DecoderStart.CARRY] * 2
    # Each segment here ends on the stop head while the row's next patch is already in flight: the
    # state kept for the next segment is the one before that patch.
    assert kept == [True, True]
    with pytest.raises(dataclasses.FrozenInstanceError):
        starts[-1].decoder = DecoderStart.REWIND


def test_the_dit_runs_on_the_bundle_chosen_for_its_bucket_and_the_rest_on_the_steps_own():
    """The warm-up's choice of the DiT's kernels (BatchRunner.choose_dit_ops) is read per batch
    bucket: an Euler step of a bucket with a chosen bundle calls the DiT through it alone, one of
    any other bucket through the step's own functions."""
    loaded = load_checkpoint(str(CKPT), device="cpu", dtype="float32")
    calls, chosen = collections.Counter(), collections.Counter()
    fns = dataclasses.replace(recording(calls), dit_choices=(("counted", recording(chosen).ops),))
    runner = BatchRunner(loaded.model, loaded.vae, 4, fns)
    runner.step.run_dit_on(2, "counted")
    layers = loaded.cfg.local_dit.num_layers
    with torch.inference_mode():
        runner.step.prologue(2)
        runner.step.euler(2)
        assert chosen["layer_output"] == layers and calls["layer_output"] == 0
        runner.step.prologue(4)
        runner.step.euler(4)
    assert calls["layer_output"] == layers and chosen["layer_output"] == layers


def test_without_a_hopper_gpu_the_dit_has_no_other_choice_and_says_why():
    from inference.runtime import hopper

    assert hopper.unavailable() == "no CUDA device"
    assert step_functions(compile=True).dit_choices == () and step_functions(compile=True, hopper=False).dit_choices == ()
