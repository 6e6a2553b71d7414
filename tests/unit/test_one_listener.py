"""One listener per stream (issue 44, item 2; inference/request/listener.py): its clock, at its
speed and with pauses as written, is what the scheduler's admission, the unread-audio budget, the
bound on a request's audio and the job's status all read. At speed 4 a listener drains its buffer
four times as fast, and admission now knows it (it assumed the model's seconds before)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from inference import SynthesisRequest
from inference.request.listener import Listener
from inference.runtime.scheduler import WAY_TO_LISTENER_S

from .test_deadline_admission import STEP_S, engine  # noqa: F401 - the tiny engine on a fake clock

RATE, PATCH = 48000, 7680


def test_its_clock_runs_at_its_speed_and_a_pause_lasts_as_written():
    fast = Listener(4.0, RATE)
    assert fast.slack(10.0) is None and not fast.playing
    fast.release(fast.lasts(10 * PATCH), now=10.0)  # 1.6 s of the model's speech: 0.4 s at speed 4
    assert fast.slack(10.0) == pytest.approx(0.4) and fast.slack(10.1) == pytest.approx(0.3)
    fast.release(fast.lasts(RATE // 2, pause=True), now=10.1)  # a 500 ms pause: 500 ms at any speed
    assert fast.slack(10.1) == pytest.approx(0.8)
    assert fast.slack(11.0) == pytest.approx(-0.1), "its buffer ran dry 0.1 s ago"
    fast.release(fast.lasts(PATCH), now=11.0)  # after a dry spell the clock restarts from then
    assert fast.slack(11.0) == pytest.approx(0.04)


def test_the_connection_is_behind_by_what_the_listener_could_have_played():
    listener = Listener(2.0, RATE)
    listener.release(listener.lasts(20 * PATCH), now=0.0)  # 1.6 s at speed 2
    listener.release(listener.lasts(PATCH), now=1.0)
    assert listener.behind() == pytest.approx(1.0), "nothing taken: a second of playing"
    listener.take(10 * PATCH)
    assert listener.behind() == pytest.approx(0.2)
    listener.take(12 * PATCH)
    assert listener.behind() == 0.0


def test_what_it_was_sent_counts_each_run_of_speech_stretched_and_each_pause_whole():
    listener = Listener(1.5, RATE)
    for samples, pause in ((PATCH, False), (PATCH, False), (RATE // 2, True), (PATCH, False)):
        listener.deliver(samples, pause)
    assert listener.sent_samples() == round(2 * PATCH / 1.5) + RATE // 2 + round(PATCH / 1.5)
    output = listener.anew().output()
    sent = sum(len(output.feed(x, p)) for x, p in ((_tone(PATCH), False), (_tone(PATCH), False),
                                                  (_zeros(RATE // 2), True), (_tone(PATCH), False)))
    assert sent + len(output.finish()) == listener.sent_samples(), "the output sends what the listener counts"
    assert listener.room(3.0, pause=True) == 3 * RATE - listener.sent_samples()


def test_admission_reads_the_listeners_clock_at_its_speed(engine):  # noqa: F811
    """Two streams, alike but for their speed: after the same steps the one at speed 4 has a
    quarter of the slack, and the engine's least slack (what work between steps must fit in) is its,
    less the audio's way to the listener."""
    slow = engine.start(SynthesisRequest("Hello world, this is a test.", seed=1, min_len=8, max_len=8))
    fast = engine.start(SynthesisRequest("Hello world, this is a test.", seed=1, min_len=8, max_len=8, speed=4.0))
    while not (slow.listener.playing and fast.listener.playing):
        engine.step()
    for _ in range(3):
        engine.step()
    now = engine.clock()
    assert fast.listener.released_s == pytest.approx(slow.listener.released_s / 4)
    assert fast.listener.slack(now) < slow.listener.slack(now) / 2
    assert engine.slack() == pytest.approx(fast.listener.slack(now) - WAY_TO_LISTENER_S)


def _tone(n: int):
    import numpy as np
    return (0.3 * np.sin(np.arange(n) * 2 * np.pi * 200 / RATE)).astype(np.float32)


def _zeros(n: int):
    import numpy as np
    return np.zeros(n, np.float32)


def test_speed_is_named_by_the_spec_the_request_the_listener_and_the_pages_slider_only():
    # Everything else (routes, Gradio API, the workbench's records) takes the spec's settings by name.
    root = Path(__file__).resolve().parents[2]
    product = [root / "app.py", *(root / "inference").rglob("*.py"), *(root / "ui").rglob("*.py"),
               *(p for p in (root / "static").rglob("*") if p.suffix in (".js", ".css", ".html") and "vendor" not in p.parts)]
    naming = sorted(str(p.relative_to(root)) for p in product if re.search(r"\bspeeds?\b", p.read_text(), re.I))
    assert naming == ["inference/request/listener.py", "inference/request/modes.py", "inference/request/request.py",
                      "ui/page/layout.py"], naming
