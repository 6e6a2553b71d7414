"""The voice library through the app on 127.0.0.1: save from an uploaded clip (with its transcript)
and from a take, find them after a restart, clone with them without the VAE encoder (counted) and
get the audio of the same request with the clip uploaded; names, limits and token rules."""
from __future__ import annotations

import io
from pathlib import Path

import httpx
import numpy as np
import pytest
import soundfile as sf

from inference import SynthesisRequest
from ui import Settings
from ui.library.uploads import decode_audio

from ..support.app_helpers import SAMPLE_RATE, assert_same_audio, expected_pcm, load_engine, pcm_of, serve
from ..fixtures.engines import CountingEncoder

VOICE = Path(__file__).resolve().parents[2] / "assets" / "voices" / "guide_en.wav"
TRANSCRIPT = "Welcome to the museum. Please keep your ticket with you while you visit the galleries."
TEXT = "Hello world, this is a test."


def start(data_dir, **settings):
    engine = load_engine()
    engine.counter = CountingEncoder(engine)
    return serve(Settings.of(data_dir=str(data_dir), **settings), engine=engine)


def upload(client, data: bytes) -> str:
    response = client.post("/voxcpm/upload", content=data)
    assert response.status_code == 200, response.text
    return response.json()["id"]


def stream(client, **body) -> np.ndarray:
    response = client.post("/voxcpm/stream", json=body)
    assert response.status_code == 200, response.text
    return pcm_of(response.content)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("data")


@pytest.fixture(scope="module")
def first_run(data_dir):
    """Saves two voices, clones with them, and records what it heard; then the app stops."""
    app = start(data_dir)
    heard = {}
    with httpx.Client(base_url=app.url, timeout=120) as client:
        clip_id = upload(client, VOICE.read_bytes())
        saved = client.post("/voxcpm/voices", json={"name": "Guide", "clip_id": clip_id, "transcript": TRANSCRIPT})
        assert saved.status_code == 201, saved.text
        assert saved.json()["transcript"] == TRANSCRIPT and "id" not in saved.json()
        calls = app.app.state.ctx.worker.engine.counter.calls
        heard["ultimate"] = stream(client, mode="ultimate", text=TEXT, voice="guide", seed=5, max_len=4)
        heard["cloning"] = stream(client, mode="cloning", text=TEXT, voice="Guide", control="Calm", seed=5, max_len=4)
        heard["encoder_calls"] = app.app.state.ctx.worker.engine.counter.calls - calls
        heard["uploaded"] = stream(client, mode="ultimate", text=TEXT, reference_id=clip_id, prompt_text=TRANSCRIPT,
                                   seed=5, max_len=4)
        take = stream(client, text=TEXT, control="A deep voice", seed=9, max_len=6)
        wav = io.BytesIO()
        sf.write(wav, take, SAMPLE_RATE, format="WAV", subtype="PCM_16")  # what the page's take WAV holds
        take_id = upload(client, wav.getvalue())
        saved = client.post("/voxcpm/voices", json={"name": "Deep", "clip_id": take_id, "transcript": TEXT})
        assert saved.status_code == 201, saved.text
        heard["take_seconds"] = take.size / SAMPLE_RATE
    app.stop()
    return heard


def test_a_saved_voice_clones_without_the_encoder_and_as_the_uploaded_clip(first_run):
    assert first_run["encoder_calls"] == 0, "saving encoded the clip: requests with the voice must not"
    np.testing.assert_array_equal(first_run["ultimate"], first_run["uploaded"])
    clip = decode_audio(VOICE.read_bytes(), max_seconds=60)
    assert_same_audio(first_run["cloning"], expected_pcm(SynthesisRequest(TEXT, reference_audio=clip, control="Calm",
                                                                          seed=5, max_len=4)))


def test_voices_are_found_after_a_restart_and_still_skip_the_encoder(first_run, data_dir):
    app = start(data_dir)
    try:
        with httpx.Client(base_url=app.url, timeout=120) as client:
            listed = client.get("/voxcpm/voices").json()
            assert [v["name"] for v in listed["voices"]] == ["Deep", "Guide"]
            deep = listed["voices"][0]
            assert deep["transcript"] == TEXT and deep["seconds"] == pytest.approx(first_run["take_seconds"], abs=0.01)
            assert listed["writable"] is True
            before = app.app.state.ctx.worker.engine.counter.calls
            again = stream(client, mode="ultimate", text=TEXT, voice="Guide", seed=5, max_len=4)
            stream(client, mode="ultimate", text=TEXT, voice="Deep", seed=1, max_len=3)
            assert app.app.state.ctx.worker.engine.counter.calls == before
            np.testing.assert_array_equal(again, first_run["ultimate"])
            audio = client.get("/voxcpm/voices/Guide/audio")
            assert audio.status_code == 200 and audio.headers["content-type"] == "audio/flac"
            assert sf.info(io.BytesIO(audio.content)).duration == pytest.approx(sf.info(VOICE).duration, abs=0.01)
    finally:
        app.stop()


def test_refusals_name_the_problem(data_dir, first_run):
    app = start(data_dir, max_voices=3)
    try:
        with httpx.Client(base_url=app.url, timeout=120) as client:
            clip_id = upload(client, VOICE.read_bytes())
            bad = client.post("/voxcpm/voices", json={"name": "../x", "clip_id": clip_id})
            assert bad.status_code == 400 and "letters or digits" in bad.json()["error"]
            taken = client.post("/voxcpm/voices", json={"name": "GUIDE", "clip_id": clip_id})
            assert taken.status_code == 409 and "already exists" in taken.json()["error"]
            assert client.post("/voxcpm/voices", json={"name": "Third", "clip_id": clip_id}).status_code == 201
            full = client.post("/voxcpm/voices", json={"name": "Fourth", "clip_id": clip_id})
            assert full.status_code == 507 and "delete one first" in full.json()["error"]
            gone = client.post("/voxcpm/stream", json={"mode": "cloning", "text": TEXT, "voice": "Nobody"})
            assert gone.status_code == 404 and "Guide" in gone.json()["error"]
            design = client.post("/voxcpm/stream", json={"text": TEXT, "voice": "Guide"})
            assert design.status_code == 400 and "not used in voice design" in design.json()["error"]
            no_transcript = client.post("/voxcpm/stream", json={"mode": "ultimate", "text": TEXT, "voice": "Third"})
            assert no_transcript.status_code == 400 and "has none" in no_transcript.json()["error"]
            assert client.patch("/voxcpm/voices/Third", json={"name": "Renamed"}).json()["name"] == "Renamed"
            assert client.delete("/voxcpm/voices/Renamed").status_code == 200
            assert client.get("/voxcpm/voices/Renamed/audio").status_code == 404
    finally:
        app.stop()


def test_names_are_found_as_they_were_saved(data_dir, first_run):
    """A name is normalized (spaces around it, composed letters) on every route, not only on a save."""
    app = start(data_dir)
    try:
        with httpx.Client(base_url=app.url, timeout=120) as client:
            clip_id = upload(client, VOICE.read_bytes())
            saved = client.post("/voxcpm/voices", json={"name": " Zoe\u0308 ", "clip_id": clip_id})
            assert saved.status_code == 201 and saved.json()["name"] == "Zo\u00eb", saved.text
            again = client.post("/voxcpm/voices", json={"name": "Zo\u00eb", "clip_id": clip_id})
            assert again.status_code == 409
            assert client.get("/voxcpm/voices/%20Zoe%CC%88/audio").status_code == 200
            stream(client, mode="ultimate", text=TEXT, voice=" Guide ", seed=5, max_len=2)
            renamed = client.patch("/voxcpm/voices/Zo%C3%AB%20", json={"name": " Zo\u00eb Two"})
            assert renamed.status_code == 200 and renamed.json()["name"] == "Zo\u00eb Two", renamed.text
            deleted = client.delete("/voxcpm/voices/%20Zoe%CC%88%20Two")
            assert deleted.status_code == 200 and deleted.json()["deleted"] == "Zo\u00eb Two", deleted.text
    finally:
        app.stop()


def test_only_token_holders_change_the_library(tmp_path):
    token = "library-token-1234"
    app = serve(Settings.of(data_dir=str(tmp_path), token=token), engine=load_engine(max_streams=1))
    try:
        with httpx.Client(base_url=app.url, timeout=120) as anyone:
            assert anyone.get("/voxcpm/voices").status_code == 401
            assert anyone.post("/voxcpm/voices", json={"name": "x", "clip_id": "y"}).status_code == 401
            refused = anyone.post("/v1/audio/speech", json={"model": "voxcpm2", "input": TEXT, "voice": "design"})
            assert refused.status_code == 401 and refused.json()["error"]["code"] == "invalid_api_key"
        with httpx.Client(base_url=app.url, timeout=120, headers={"Authorization": f"Bearer {token}"}) as holder:
            clip_id = upload(holder, VOICE.read_bytes())
            assert holder.post("/voxcpm/voices", json={"name": "Mine", "clip_id": clip_id}).status_code == 201
    finally:
        app.stop()
    # Reachable by others without a token (app.py decides): everyone may use the library, nobody change it.
    app = serve(Settings.of(data_dir=str(tmp_path), writable=False), engine=load_engine(max_streams=1))
    try:
        with httpx.Client(base_url=app.url, timeout=120) as client:
            assert [v["name"] for v in client.get("/voxcpm/voices").json()["voices"]] == ["Mine"]
            for response in (client.delete("/voxcpm/voices/Mine"),
                             client.patch("/voxcpm/voices/Mine", json={"name": "Yours"}),
                             client.post("/voxcpm/voices", json={"name": "New", "clip_id": "x"})):
                assert response.status_code == 403 and "--token" in response.json()["error"]
            assert client.get("/voxcpm/voices").json()["writable"] is False
    finally:
        app.stop()
