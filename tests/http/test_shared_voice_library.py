"""Two replicas of the app sharing one voice library in PostgreSQL (--voice-store), over HTTP on
127.0.0.1: a voice saved through one is listed and cloned by the other; with the database stopped,
the voice routes answer 503 with the reason and a Retry-After while a design request still streams;
started again, the voice routes recover without a restart."""
from __future__ import annotations

import time
from pathlib import Path

import httpx
import numpy as np
import pytest

from ..support.app_helpers import pcm_of, record_figure, wait_until
from ..support.postgres import fresh_database

VOICE = Path(__file__).resolve().parents[2] / "assets" / "voices" / "guide_en.wav"
TEXT = "Hello world, this is a test."


@pytest.fixture(scope="module")
def database(postgres_cluster):
    """On the session's own server: this module stops and starts it."""
    with fresh_database(postgres_cluster.url) as url:
        yield url


@pytest.fixture(scope="module")
def replicas(serve_app, database):
    return serve_app(voice_store=database), serve_app(voice_store=database)


def stream(client, **body) -> httpx.Response:
    return client.post("/voxcpm/stream", json={"seed": 5, "max_len": 4, **body})


def test_replicas_share_voices_and_survive_the_database_going_away(replicas, postgres_cluster):
    a, b = (httpx.Client(base_url=app.url, timeout=60) for app in replicas)
    with a, b:
        clip_id = a.post("/voxcpm/upload", content=VOICE.read_bytes()).json()["id"]
        saved = a.post("/voxcpm/voices", json={"name": "Guide", "clip_id": clip_id})
        assert saved.status_code == 201, saved.text
        assert [v["name"] for v in b.get("/voxcpm/voices").json()["voices"]] == ["Guide"]
        cloned = stream(b, mode="cloning", text=TEXT, voice="guide")
        assert cloned.status_code == 200 and pcm_of(cloned.content).size > 0, cloned.text
        again = a.post("/voxcpm/voices", json={"name": "GUIDE", "clip_id": clip_id})
        assert again.status_code == 409 and "already exists" in again.json()["error"]

        postgres_cluster.stop()
        try:
            for response in (b.get("/voxcpm/voices"), b.delete("/voxcpm/voices/Guide"),
                             stream(b, mode="cloning", text=TEXT, voice="guide")):
                assert response.status_code == 503, response.text
                assert "database cannot be reached (" in response.json()["error"]
            assert b.get("/voxcpm/voices").headers["retry-after"] == "5"
            openai = b.post("/v1/audio/speech", json={"model": "tts-1", "input": TEXT, "voice": "guide"})
            assert openai.status_code == 503 and openai.headers["retry-after"] == "5", openai.text
            assert "database cannot be reached (" in openai.json()["error"]["message"]
            # Once the replica has found the database gone, a 503 takes no wait for a connection (2 s).
            answered = wait_until(lambda: _answered_in(b, "/voxcpm/voices", 503), timeout=10, interval=0.2)
            record_figure(f"voice routes (PostgreSQL store) with the database stopped: 503 in {answered * 1000:.0f} ms")
            designed = stream(b, text=TEXT, control="A calm voice")  # no voice library needed
            assert designed.status_code == 200 and pcm_of(designed.content).size > 0
            assert a.post("/voxcpm/upload", content=VOICE.read_bytes()).status_code == 200
            assert b.get("/ready").status_code == 200  # still taking requests: only the library is away
        finally:
            postgres_cluster.start()
        back = time.perf_counter()
        wait_until(lambda: b.get("/voxcpm/voices").status_code == 200, timeout=20, interval=0.1)
        record_figure(f"voice routes (PostgreSQL store) answering again {time.perf_counter() - back:.1f} s after "
                      f"the database came back, with no restart")
        assert [v["name"] for v in b.get("/voxcpm/voices").json()["voices"]] == ["Guide"]
        assert b.patch("/voxcpm/voices/guide", json={"name": "Guide Two"}).status_code == 200
        listed = a.get("/voxcpm/voices")
        assert listed.status_code == 200 and [v["name"] for v in listed.json()["voices"]] == ["Guide Two"]
        heard = stream(a, mode="cloning", text=TEXT, voice="guide two")
        np.testing.assert_array_equal(pcm_of(heard.content), pcm_of(cloned.content))


def _answered_in(client, path: str, status: int, within_s: float = 1.0) -> float | None:
    """The seconds `path` took to answer with `status`, if it answered so within `within_s`."""
    start = time.perf_counter()
    right = client.get(path).status_code == status
    took = time.perf_counter() - start
    return took if right and took < within_s else None
