"""Long sessions and many users on the tiny model, over real HTTP on 127.0.0.1 only (each test
sends a fixed number of requests and stops by itself): 100 start-and-cancel cycles and 250
requests in a row leave memory, tensors, open handles and threads where they were, with no
slowdown; concurrent fixed-seed runs give exactly the audio of the same runs one by one."""
from __future__ import annotations

import json
import socket
import statistics
import threading
import time
import tracemalloc

import httpx
import numpy as np
import pytest

from ..support.app_helpers import assert_same_audio, pcm_of, record_figure, resources, wait_until

TEXT = "Hello world, this is a test."
VOICE_TEXT = "Welcome to the museum. Please keep your ticket with you while you visit the galleries."
KEEP_FINISHED = 16  # the listed-jobs window, filled before measuring so that only a leak could grow
CYCLES, IN_A_ROW, WARM = 100, 250, 20
QUICK = {"inference_timesteps": 1}  # one diffusion step per patch: the whole path, a third of the time
# Growth that would be a leak: one unread patch per request is 30 KiB, so 250 of them would be 7.5 MiB.
MAX_GROWTH = {"traced_mb": 1.0, "rss_mb": 48.0, "tensors": 4, "tensor_mb": 0.5, "open_fds": 2, "threads": 2,
              "cuda_mb": 1.0, "jobs": 0, "clips": 0}


@pytest.fixture(scope="module")
def app(serve_app):
    running = serve_app(max_queue=32, keep_finished=KEEP_FINISHED)
    tracemalloc.start()  # after loading: only what requests allocate is of interest, and tracing is slow
    yield running
    tracemalloc.stop()


@pytest.fixture(scope="module")
def client(app):
    with httpx.Client(base_url=app.url, timeout=60) as c:
        yield c


def assert_flat(before: dict, after: dict, what: str):
    record_figure(f"{what}: before {_fmt(before)}; after {_fmt(after)}")
    for key, allowed in MAX_GROWTH.items():
        if key in before:
            assert after[key] - before[key] <= allowed, f"{key} grew from {before[key]} to {after[key]} ({what})"


def _fmt(snapshot: dict) -> str:
    return ", ".join(f"{k}={v:.1f}" if isinstance(v, float) else f"{k}={v}" for k, v in snapshot.items())


def raw_stream(app, body: dict, read_first: bool) -> socket.socket:
    """A raw connection, so the test decides exactly when it goes, as a closed tab does."""
    payload = json.dumps(body).encode()
    host, port = app.url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=30)
    sock.sendall(b"POST /voxcpm/stream HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                 b"Content-Length: " + str(len(payload)).encode() + b"\r\n\r\n" + payload)
    if read_first:
        assert sock.recv(4096).startswith(b"HTTP/1.1 200")
    return sock


def cancel_once(app, client, index: int):
    """One of three ways a generation is abandoned: the tab closes while audio streams, Stop (the
    cancel route) while it streams, or the tab closes before the first patch."""
    request_id = f"cycle-{index:04d}-{time.monotonic_ns()}"
    body = {"text": TEXT, "seed": index, "min_len": 300, "max_len": 300, "request_id": request_id, **QUICK}
    way = index % 3
    if way == 1:
        with client.stream("POST", "/voxcpm/stream", json=body) as response:
            next(response.iter_bytes())
            assert client.post(f"/voxcpm/jobs/{request_id}/cancel").status_code == 200
    else:
        raw_stream(app, body, read_first=way == 0).close()
    wait_until(lambda: (job := app.worker.get(request_id)) is not None and job.state == "cancelled", timeout=30)
    wait_until(lambda: not app.worker.busy and app.worker.waiting == 0, timeout=30)  # the slot is free
    return app.worker.get(request_id).patches


def test_start_and_cancel_cycles_leave_nothing_behind(app, client):
    for index in range(WARM):
        cancel_once(app, client, index)
    before = resources(app)
    patches = [cancel_once(app, client, WARM + index) for index in range(CYCLES)]
    after = resources(app)
    assert max(patches) < 300  # every one stopped early
    record_figure(f"cancel cycles: {CYCLES} (after {WARM} warm-up), patches made before the stop: "
                  f"median {statistics.median(patches)}, max {max(patches)}")
    assert_flat(before, after, f"{CYCLES} start-and-cancel cycles")


def one_request(client, seed: int) -> tuple[float, bytes]:
    start = time.perf_counter()
    response = client.post("/voxcpm/stream", json={"text": TEXT, "seed": seed, "min_len": 0, "max_len": 1, **QUICK})
    elapsed = time.perf_counter() - start
    assert response.status_code == 200, response.text
    return elapsed, response.content


def test_requests_in_a_row_without_growth_or_slowdown(app, client):
    first_audio = {seed: one_request(client, seed)[1] for seed in range(5)}
    for index in range(WARM):
        one_request(client, index % 5)
    before = resources(app)
    times = []
    for index in range(IN_A_ROW):
        elapsed, audio = one_request(client, index % 5)
        assert audio == first_audio[index % 5]  # the 50th run of a seed is the first one, bit for bit
        times.append(elapsed)
    after = resources(app)
    early, late = np.percentile(times[:100], 25), np.percentile(times[-100:], 25)
    record_figure(f"{IN_A_ROW} requests in a row: first 100 p25 {early * 1000:.1f} ms, median "
                  f"{np.median(times[:100]) * 1000:.1f} ms; last 100 p25 {late * 1000:.1f} ms, median "
                  f"{np.median(times[-100:]) * 1000:.1f} ms; total {sum(times):.1f} s")
    assert_flat(before, after, f"{IN_A_ROW} requests in a row")
    # The lower quartile, because other processes on a shared CI machine only ever add time.
    assert late <= 1.5 * early + 0.005, f"slowed down from {early * 1000:.1f} ms to {late * 1000:.1f} ms"


def mixed_requests(clip_id: str) -> list[dict]:
    """Twelve different runs over the three modes, each with its own seed and length."""
    out = []
    for index in range(12):
        body = {"text": f"{TEXT} Number {index}.", "seed": 100 + index, "min_len": 2 + index % 3,
                "max_len": 2 + index % 3, "inference_timesteps": 4}
        if index % 3 == 1:
            body.update(mode="cloning", reference_id=clip_id, control="Cheerful" if index % 2 else None)
        elif index % 3 == 2:
            body.update(mode="ultimate", reference_id=clip_id, prompt_text=VOICE_TEXT)
        out.append(body)
    return out


def run_concurrently(app, bodies: list[dict], abandon: int) -> list[bytes]:
    """Every body at once from its own client, plus `abandon` streams that are dropped mid-way."""
    results: list = [None] * len(bodies)
    gate = threading.Barrier(len(bodies) + abandon)

    def fetch(index):
        with httpx.Client(base_url=app.url, timeout=120) as own:
            gate.wait()
            results[index] = own.post("/voxcpm/stream", json=bodies[index])

    def drop(index):
        gate.wait()
        body = {"text": TEXT, "seed": index, "min_len": 300, "max_len": 300}
        raw_stream(app, body, read_first=True).close()

    threads = [threading.Thread(target=fetch, args=(i,)) for i in range(len(bodies))]
    threads += [threading.Thread(target=drop, args=(i,)) for i in range(abandon)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert all(r is not None and r.status_code == 200 for r in results), [getattr(r, "text", r) for r in results]
    return [r.content for r in results]


def test_concurrent_fixed_seed_runs_equal_the_same_runs_one_by_one(app, client):
    from .test_pcm_route import VOICE

    clip_id = client.post("/voxcpm/upload", content=VOICE.read_bytes()).json()["id"]
    bodies = mixed_requests(clip_id)
    alone = [client.post("/voxcpm/stream", json=body).content for body in bodies]
    rounds = 3
    for _ in range(rounds):
        together = run_concurrently(app, bodies, abandon=4)
        for body, want, got in zip(bodies, alone, together):
            # Batched rows round slightly differently on the CPU (relative 1e-6): at most 1 LSB apart.
            assert_same_audio(pcm_of(got), pcm_of(want))
    wait_until(lambda: not app.worker.busy and app.worker.waiting == 0, timeout=60)
    record_figure(f"concurrency: {rounds} rounds of {len(bodies)} simultaneous fixed-seed requests "
                  f"({rounds * len(bodies)} served, all within 1 LSB of the same runs one by one) with 4 dropped "
                  f"streams each round")
