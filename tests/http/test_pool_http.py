"""The app served from two engines (as from two GPUs) over real HTTP on 127.0.0.1: the same route
and bytes as with one, requests spread over both, /health reports each engine's rows; and --gpus."""
from __future__ import annotations

import threading

import httpx
import pytest
import torch

import startup
from inference import SynthesisRequest
from inference.serving.pool import WorkerPool
from startup import StartupError

from ..support.app_helpers import assert_same_audio, expected_pcm, load_engine, pcm_of, wait_until

TEXT = "Hello world, this is a test."


@pytest.fixture(scope="module")
def app(serve_app):
    return serve_app(max_queue=2, engine=[load_engine(max_streams=2), load_engine(max_streams=2)])



def test_two_engines_serve_one_route_with_the_same_bytes(app, client):
    assert isinstance(app.worker, WorkerPool)
    response = client.post("/voxcpm/stream", json={"text": TEXT, "seed": 42, "max_len": 5})
    assert response.status_code == 200
    assert_same_audio(pcm_of(response.content), expected_pcm(SynthesisRequest(TEXT, seed=42, max_len=5)))
    job = client.get(f"/voxcpm/jobs/{response.headers['x-request-id']}").json()
    assert job["state"] == "done" and job["outcome"] == "ok"


def test_concurrent_streams_spread_and_health_reports_each_engine(app, client):
    health = client.get("/voxcpm/health").json()
    assert health["ok"] is True and health["max_queue"] == 4
    assert [(g["device"], g["rows"], g["rows_in_use"]) for g in health["gpus"]] == [("cpu", 2, 0), ("cpu", 2, 0)]
    opened, done = threading.Barrier(3), threading.Event()
    ids = [f"spread-{i}" for i in range(2)]

    def listen(request_id):
        body = {"text": TEXT, "seed": 7, "min_len": 300, "max_len": 300, "request_id": request_id}
        with httpx.Client(base_url=app.url, timeout=60) as c, c.stream("POST", "/voxcpm/stream", json=body) as r:
            assert r.status_code == 200
            # Keep the iterator: a throwaway `next(r.iter_bytes())` closes the connection as soon as
            # its generator is dropped (httpcore closes on GeneratorExit), so the server cancels this
            # stream while the other is still starting and /health sees [0, 1].
            audio = r.iter_bytes()
            next(audio)  # audio is flowing
            opened.wait(30)
            done.wait(30)  # leaving the block closes the connection, which cancels the stream

    threads = [threading.Thread(target=listen, args=(i,), daemon=True) for i in ids]
    for t in threads:
        t.start()
    opened.wait(60)
    gpus = client.get("/voxcpm/health").json()["gpus"]
    assert [g["rows_in_use"] for g in gpus] == [1, 1]  # one on each engine, not both on the first
    assert {app.worker.worker_of(app.worker.get(i)) for i in ids} == set(app.worker.workers)
    done.set()
    for t in threads:
        t.join(30)
    wait_until(lambda: not app.worker.busy, timeout=30)
    assert all(app.worker.get(i).state == "cancelled" for i in ids)


def test_gpus_option_picks_the_devices(monkeypatch):
    assert startup.check_gpus(None, "cpu") == ["cpu"]
    assert startup.check_gpus(None, "cuda:1") == ["cuda:1"]
    with pytest.raises(StartupError, match="--gpus 2"):
        startup.check_gpus(2, "cpu")
    with pytest.raises(StartupError, match="--gpus 2"):
        startup.check_gpus(2, "cuda:1")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)  # a host with two GPUs
    assert startup.check_gpus(None, "cuda") == ["cuda:0", "cuda:1"]
    assert startup.check_gpus(1, "cuda") == ["cuda:0"]
    for wrong in (0, 3):
        with pytest.raises(StartupError, match="from 1 to 2"):
            startup.check_gpus(wrong, "cuda")
