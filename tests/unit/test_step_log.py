"""The scheduler's step log (logger voxcpm.steps, one JSON line per step at DEBUG) and the lab tool
that reads it (bench/lab/step_trace.py): on the tiny model with a fake clock, so that a step can be
made slower than the audio it makes and listeners run dry inside their segments."""
from __future__ import annotations

import json
import logging
import sys

import pytest

from bench.lab import step_trace
from inference import Engine, SynthesisRequest
from inference.runtime.scheduler import WAY_TO_LISTENER_S

from ..support.app_helpers import on_fake_device_time, tiny_checkpoint


@pytest.fixture()
def engine(monkeypatch):
    """Each step takes engine.clock.step_s on a fake clock."""
    engine = Engine.from_pretrained(tiny_checkpoint(), device="cpu", dtype="float32", warmup=False, max_streams=8)
    engine.clock = on_fake_device_time(engine, monkeypatch, step_s=0.05)
    return engine


def logged_steps(caplog) -> list[dict]:
    return [json.loads(r.getMessage()) for r in caplog.records if r.name == "voxcpm.steps"]


def test_each_step_logs_what_it_did_and_the_listeners_it_found_dry(engine, caplog):
    caplog.set_level(logging.DEBUG, logger="voxcpm.steps")
    streams = [engine.start(SynthesisRequest("Hello world, this is a test.", seed=s, min_len=12, max_len=12))
               for s in range(3)]
    for _ in range(4):  # faster than the audio (0.05 s a step for 0.16 s of it): nobody runs dry
        engine.step()
    engine.clock.step_s = 0.4  # now slower: each patch comes after its listener has played everything
    for _ in range(4):
        engine.step()
    steps = logged_steps(caplog)
    assert len(steps) == 8
    assert steps[0]["admitted"] == 3 and steps[0]["joining"] == 3 and steps[0]["live"] == 0
    assert all(s["admitted"] == 0 and s["live"] == 3 for s in steps[1:])
    assert [round(s["ms"]) for s in steps] == [50] * 4 + [400] * 4
    assert sum(s["dry_inside"] for s in steps[:4]) == 0
    assert sum(s["dry_inside"] for s in steps[4:]) >= 3, steps  # every stream, once the slow steps drained it
    assert all(s["dry_seam"] == 0 for s in steps)
    # No listener plays before its first patch; one comes with each step's end, 0.16 s of audio, of
    # which the step plans with all but the audio's way to the listener.
    assert steps[1]["slack_ms"] is None and steps[2]["slack_ms"] == pytest.approx(1000 * (0.16 - WAY_TO_LISTENER_S))
    assert not any(s.done for s in streams)


def test_the_step_log_is_silent_when_its_logger_is_off(engine, caplog):
    caplog.set_level(logging.INFO, logger="voxcpm.steps")
    engine.start(SynthesisRequest("Hello world.", seed=1, min_len=3, max_len=3))
    for _ in range(3):
        engine.step()
    assert logged_steps(caplog) == []


def test_the_trace_splits_a_log_into_loads_and_seconds(tmp_path):
    def step(t, ms, live=16, admitted=0, dry_inside=0, dry_seam=0):
        return {"t": t, "ms": ms, "live": live, "joining": 0, "parked": 0, "admitted": admitted,
                "slack_ms": 100.0, "step_ms": 40.0, "join_ms": 1.0, "dry_seam": dry_seam, "dry_inside": dry_inside}
    first = [step(10.0, 100, admitted=4, dry_inside=2), step(10.5, 120, dry_inside=1), step(11.2, 40), step(11.6, 30)]
    idle = [step(12.0, 1, live=1)]  # too few streams to count as a load's
    second = [step(20.0, 50, dry_seam=3)]
    log = tmp_path / "steps.jsonl"
    log.write_text("the app's first line\n" + "\n".join(json.dumps(s) for s in first + idle + second) + "\n")
    loads = step_trace.loads(step_trace.records(log))
    assert [len(load) for load in loads] == [4, 1]
    bins = step_trace.by_second(loads[0])
    assert [(b["from_s"], b["steps"], b["median_ms"], b["max_ms"], b["dry_inside"]) for b in bins] == [
        (0.0, 2, 110, 120, 3), (1.0, 2, 35, 40, 0)]
    assert bins[0]["admitted"] == 2
    text = step_trace.table(log)
    assert "load 1: 4 steps over 1.6 s" in text and "load 2" in text and "| 0 | 2 | 110 / 120 |" in text


def test_the_trace_puts_each_sentences_send_delay_in_its_second_first_sentences_apart_from_seams(tmp_path):
    steps = [{"t": t, "ms": 40.0, "live": 16, "joining": 0, "parked": 0, "admitted": 0, "slack_ms": 100.0,
              "step_ms": 40.0, "join_ms": 1.0, "dry_seam": 0, "dry_inside": 0} for t in (10.0, 10.5, 11.2)]
    sent = [{"t": 10.1, "sentence": 0, "sent_after_ms": 4.0}, {"t": 10.2, "sentence": 0, "sent_after_ms": 9.0},
            {"t": 10.3, "sentence": 0, "sent_after_ms": 6.0}, {"t": 10.9, "sentence": 1, "sent_after_ms": 30.0},
            {"t": 11.3, "sentence": 2, "sent_after_ms": 2.0}, {"t": 11.4, "sentence": 1, "sent_after_ms": 8.0},
            {"t": 99.0, "sentence": 1, "sent_after_ms": 500.0}]  # long after the load: not its
    log = tmp_path / "steps.jsonl"
    log.write_text("\n".join(json.dumps(line) for line in steps + sent) + "\n")
    assert step_trace.records(log) == steps  # a sentence's line is not a step
    assert step_trace.sends(log) == sent
    bins = step_trace.by_second(step_trace.loads(step_trace.records(log))[0], sent=step_trace.sends(log))
    assert [(b["first_sent_ms"], b["seam_sent_ms"]) for b in bins] == [((6.0, 9.0), (30.0, 30.0)), (None, (5.0, 8.0))]
    text = step_trace.table(log)
    assert "| 6 / 9 | 30 / 30 |" in text and "| - | 5 / 8 |" in text


def test_the_traced_app_keeps_logging_its_steps_after_it_configures_logging(tmp_path, monkeypatch):
    """uvicorn's logging config closes every handler in the process, the trace's own with them."""
    app = tmp_path / "app.py"
    app.write_text("import logging, logging.config\n"
                   "logging.config.dictConfig({'version': 1, 'disable_existing_loggers': False})\n"
                   "logging.getLogger('voxcpm.steps').debug('{\"t\": 1.0, \"ms\": 2.0}')\n"
                   "logging.getLogger('voxcpm.sends').debug('{\"t\": 1.5, \"sentence\": 1, \"sent_after_ms\": 3.0}')\n")
    log = tmp_path / "steps.jsonl"
    for name in ("voxcpm.steps", "voxcpm.sends"):
        traced = logging.getLogger(name)
        monkeypatch.setattr(traced, "handlers", [])
        monkeypatch.setattr(traced, "propagate", True)
        monkeypatch.setattr(traced, "level", logging.NOTSET)
    monkeypatch.setattr(sys, "argv", ["pytest"])
    monkeypatch.setattr(sys, "path", list(sys.path))
    step_trace.run_app(log, [str(app)])
    assert step_trace.records(log) == [{"t": 1.0, "ms": 2.0}]
    assert step_trace.sends(log) == [{"t": 1.5, "sentence": 1, "sent_after_ms": 3.0}]
