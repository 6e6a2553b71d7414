"""bench/floor.py, the served benchmark's floor: under uvicorn it answers the stream route in the
framed shape the load generator reads (bench/http_load.py), so `bench.serve --floor` reports what
the client processes and HTTP take with no server work in between."""
from __future__ import annotations

import asyncio
import functools
import json

from bench import floor, http_load, serve


def burst_against_the_floor(tmp_path, size: int) -> tuple[list[http_load.Result], float]:
    """A burst of `size` one-patch requests from one client process against bench/floor.py under uvicorn."""
    port = serve.free_port()
    server = serve.start_floor(port, [], tmp_path / "floor.log")
    url = f"http://127.0.0.1:{port}"
    try:
        serve.wait_ready(url, server, timeout_s=60)
        body = functools.partial(http_load.request_body, patches=1, timesteps=2, text="x")
        return asyncio.run(http_load.burst(url, size, body, http_load.stay))
    finally:
        server.terminate()
        server.wait(30)

def test_the_load_generator_reads_a_first_audio_and_the_status_from_the_floor_server(tmp_path):
    results, wall = burst_against_the_floor(tmp_path, 4)
    assert [r.status for r in results] == [200] * 4 and all(r.error is None for r in results)
    assert all(r.first_audio is not None and 0 < r.first_audio <= wall for r in results)
    assert all(r.samples == floor.SAMPLES and r.server == {"state": "done", "outcome": "ok"} for r in results)
    row = http_load.summarize(results, wall, serve.SAMPLE_RATE)
    assert row["served"] == 4 and row["ttfb_p95_ms"] is not None


def test_first_audio_is_timed_from_the_request_leaving_the_client_and_its_own_wait_kept_apart(tmp_path):
    """A client process sending 16 at once queues them behind each other's headers and JSON: that
    wait is the client's, kept in `queued`, and first audio counts from the request's send."""
    results, wall = burst_against_the_floor(tmp_path, 16)
    assert all(r.first_audio is not None for r in results)
    # the request sent last waited for the 15 before it to go out: its own wait is not zero
    assert max(r.queued for r in results) > 0
    assert all(r.first_audio_from_start == r.queued + r.first_audio for r in results)
    row = http_load.summarize(results, wall, serve.SAMPLE_RATE)
    assert row["from_start_p95_ms"] >= row["ttfb_p95_ms"] and row["queued_p95_ms"] > 0
    assert "client's own wait" in serve.table([{"load": "burst c=16", **row}])


def test_a_late_frame_is_one_that_comes_after_the_audio_before_it_ran_out():
    """Not any gap over a patch: a stream well ahead may come in batches with the player never dry."""
    patch = 7680  # 160 ms at 48 kHz
    batched = http_load.Result(sent=0.0, arrivals=[0.0, 0.02, 0.04, 0.14, 0.14, 0.14, 0.25, 0.25],
                               sizes=[patch] * 8)
    assert max(batched.gaps) > 0.1 and batched.late(48000) == 0
    # one patch, then nothing for 200 ms: the player ran dry 40 ms before the second came
    dry = http_load.Result(sent=0.0, arrivals=[0.0, 0.2, 0.25], sizes=[patch] * 3)
    assert dry.late(48000) == 1
    # after a dropout the player starts again from the late frame
    twice = http_load.Result(sent=0.0, arrivals=[0.0, 0.2, 0.6], sizes=[patch] * 3)
    assert twice.late(48000) == 2


def test_the_in_process_sweep_can_spread_a_burst_as_http_delivers_it():
    """bench.bench --spread-ms: the same burst arriving one request after another over the span,
    first at 0 and last at its end, evenly: the engine's share of a served burst without HTTP."""
    from bench import concurrency

    assert concurrency.burst(5, 0.04) == [0.0, 0.01, 0.02, 0.03, 0.04]
    assert concurrency.burst(64) == [0.0] * 64 and concurrency.burst(1, 0.04) == [0.0]


def test_against_measures_a_second_app_in_turns_with_the_first_on_one_machine(tmp_path, monkeypatch):
    """`bench.serve --against ARGS`: a second app beside the first, every load run by each in the
    turns of --order, each row named by its app. Here both apps are the floor server (started as
    app.py would be, with the arguments recorded), so the test needs no model."""
    started = []

    def start(checkpoint, port, extra, log, root=serve.ROOT):
        started.append((log.name, extra, root))
        return serve.start_floor(port, [], log)
    monkeypatch.setattr(serve, "start_app", start)
    out = tmp_path / "out"
    serve.main(["--checkpoint", str(tmp_path), "--against", "--prepare-threads 2", "--order", "ABBA",
                "--concurrency", "2", "--rounds", "1", "--rates", "--out", str(out)])
    assert sorted(started) == [("app-A.log", [], serve.ROOT), ("app-B.log", ["--prepare-threads", "2"], serve.ROOT)]
    rows = json.loads((out / "serve.json").read_text())["rows"]
    assert [r["app"] for r in rows] == list("ABBA") and all(r["served"] == r["requests"] == 2 for r in rows)
    assert "| B: burst c=2 |" in (out / "serve.md").read_text()
