"""GET /metrics (read back with prometheus_client's own parser: the counts add up to the requests
made) and GET /ready (503 until the engine has warmed up), on the app served by uvicorn."""
from __future__ import annotations

import gc
import threading
import time

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from ui import Settings

from ..support.app_helpers import SAMPLE_RATE, load_engine, serve, wait_until

BODY = dict(model="tts-1", input="Hello world, this is a test.", voice="alloy", response_format="pcm", max_len=6)
TOKEN = "metrics-token-0123456789"


def samples(base: str, **kwargs) -> dict:
    """Every sample of GET /metrics, keyed by (name, sorted labels)."""
    text = httpx.get(base + "/metrics", timeout=30, **kwargs).text
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def total(found: dict, name: str, **labels) -> float:
    return sum(v for (n, ls), v in found.items() if n == name and set(labels.items()) <= set(ls))


def test_metrics_count_what_was_served_and_refused(app):
    audio_s = 0.0
    with httpx.Client(base_url=app.url, timeout=120) as client:
        for body in (BODY, {**BODY, "voice": "onyx"}):
            response = client.post("/v1/audio/speech", json=body)  # pcm at OpenAI's 24 kHz
            audio_s += len(response.content) / 2 / int(response.headers["x-sample-rate"])
        page = client.post("/voxcpm/stream", json={"text": "Hi there.", "control": "A calm voice", "max_len": 6})
        audio_s += len(page.content) / 2 / SAMPLE_RATE
        assert client.post("/v1/audio/speech", json={**BODY, "model": "tts-9"}).status_code == 400
        assert client.post("/voxcpm/stream", json={"text": "x", "cfg": 1}).status_code == 400
    found = wait_until(lambda: (s := samples(app.url)) and total(s, "voxcpm_requests_total") == 3 and s)
    assert found, "three streamed requests must be counted"
    assert total(found, "voxcpm_requests_total", mode="design", outcome="ok") == 3
    assert total(found, "voxcpm_ttfp_seconds_count", mode="design") == 3
    assert total(found, "voxcpm_rtf_count") == 3 and total(found, "voxcpm_rtf_sum") > 0
    assert total(found, "voxcpm_audio_seconds_total") == pytest.approx(audio_s, abs=1e-6)
    assert total(found, "voxcpm_refusals_total", status="400", outcome="input_error") == 2
    gpu = dict(gpu="0", device=str(app.worker.gpus()[0]["device"]))
    assert total(found, "voxcpm_gpu_rows_in_use", **gpu) == 0 and total(found, "voxcpm_gpu_waiting", **gpu) == 0
    assert total(found, "voxcpm_gpu_rows", **gpu) == app.worker.gpus()[0]["rows"] > 0
    assert total(found, "voxcpm_gpu_alive", **gpu) == 1


def test_metrics_show_the_garbage_collectors_pauses(app):
    gc.collect(2)  # the app runs in this process: its watch saw this one
    found = samples(app.url)
    assert total(found, "voxcpm_gc_collections_total", generation="2") >= 1
    assert total(found, "voxcpm_gc_pause_seconds_total", generation="2") > 0
    longest = total(found, "voxcpm_gc_pause_longest_seconds", generation="2")
    assert 0 < longest <= total(found, "voxcpm_gc_pause_seconds_total", generation="2")


def test_ready_answers_503_until_the_engine_has_warmed_up():
    engine, release = load_engine(), threading.Event()
    warm = engine.warmup
    engine.warmup = lambda: (release.wait(60), warm())  # an instance attribute: this engine only
    running = serve(Settings.of(warm_up=True), engine=engine)
    try:
        before = httpx.get(running.url + "/ready", timeout=30)
        assert before.status_code == 503 and before.json()["ready"] is False and before.headers["retry-after"]
        release.set()
        assert wait_until(lambda: httpx.get(running.url + "/ready", timeout=30).status_code == 200, timeout=60)
        assert httpx.get(running.url + "/ready", timeout=30).json()["gpus"][0]["alive"] is True
    finally:
        release.set()
        running.stop()


def test_metrics_need_the_token_and_ready_does_not():
    running = serve(Settings.of(token=TOKEN))
    try:
        assert httpx.get(running.url + "/metrics", timeout=30).status_code == 401
        assert httpx.get(running.url + "/ready", timeout=30).status_code == 200
        found = samples(running.url, headers={"Authorization": f"Bearer {TOKEN}"})
        assert total(found, "voxcpm_gpu_alive") == 1
    finally:
        running.stop()


def test_underruns_the_page_reports_are_counted_once_per_take(app):
    job = "playback-take-0001"
    report = {"job": job, "underruns": 2, "gap_ms": 150.0}
    with httpx.Client(base_url=app.url, timeout=120) as client:
        before = samples(app.url)
        asked = time.perf_counter()
        stream = client.post("/voxcpm/stream", json={"text": "Hi.", "control": "A calm voice", "max_len": 4,
                                                     "request_id": job})
        assert stream.status_code == 200
        # A page reports once the take has played: later than its 150 ms of gaps after asking, which
        # is all a report may claim (the clamp, tested below).
        time.sleep(max(0.0, 0.3 - (time.perf_counter() - asked)))
        answers = [client.post("/voxcpm/playback", json=report).json() for _ in range(2)]
        stranger = client.post("/voxcpm/playback", json={**report, "job": "nobody-ran-this"}).json()
        bad = client.post("/voxcpm/playback", json={**report, "underruns": -1})
    assert answers == [{"counted": True, "underruns": 2, "gap_ms": 150.0}, {"counted": False}]
    assert stranger == {"counted": False}
    assert bad.status_code == 400 and "underruns" in bad.json()["error"]
    after = samples(app.url)
    grew = {name: total(after, name) - total(before, name) for name in
            ("voxcpm_playback_reports_total", "voxcpm_playback_underruns_total", "voxcpm_playback_gap_seconds_total")}
    assert grew == {"voxcpm_playback_reports_total": 1, "voxcpm_playback_underruns_total": 2,
                    "voxcpm_playback_gap_seconds_total": pytest.approx(0.15)}


def test_a_playback_report_is_clamped_to_what_its_take_could_have_had(app):
    """Issue 37, item 7: one short take cannot report 100,000 underruns and a day of gaps."""
    job = "playback-take-0002"
    with httpx.Client(base_url=app.url, timeout=120) as client:
        asked = time.perf_counter()
        stream = client.post("/voxcpm/stream", json={"text": "Hi.", "control": "A calm voice", "max_len": 2,
                                                     "request_id": job})
        assert stream.status_code == 200
        chunks = client.get(f"/voxcpm/jobs/{job}").json()["patches"]  # no pause: one chunk a patch
        before = samples(app.url)
        answer = client.post("/voxcpm/playback", json={"job": job, "underruns": 100_000,
                                                       "gap_ms": 86_400_000.0}).json()
        took_ms = (time.perf_counter() - asked) * 1000.0
    after = samples(app.url)
    assert answer["counted"] and answer["underruns"] == chunks and 0 < answer["gap_ms"] <= took_ms
    assert total(after, "voxcpm_playback_underruns_total") - total(before, "voxcpm_playback_underruns_total") == chunks
    gap_s = total(after, "voxcpm_playback_gap_seconds_total") - total(before, "voxcpm_playback_gap_seconds_total")
    assert gap_s == pytest.approx(answer["gap_ms"] / 1000.0, abs=1e-6) and gap_s <= took_ms / 1000.0
