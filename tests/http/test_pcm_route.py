"""The PCM route over real HTTP on 127.0.0.1: bytes equal synthesize(), headers, cancellation,
uploads by id, and errors as 4xx JSON."""
from __future__ import annotations

import dataclasses

import io
import json
from pathlib import Path

import httpx
import numpy as np
import pytest
import soundfile as sf

from inference import SynthesisRequest
from inference.request import modes
from inference.config import LIMITS
from ui import Settings
from ui.library.uploads import decode_audio

from ..support.app_helpers import SAMPLE_RATE, assert_same_audio, expected_pcm, pcm_of, serve, wait_until

VOICE = Path(__file__).resolve().parents[2] / "assets" / "voices" / "guide_en.wav"
VOICE_TEXT = "Welcome to the museum. Please keep your ticket with you while you visit the galleries."
TEXT = "Hello world, this is a test."


@pytest.fixture(scope="module")
def app(serve_app):
    return serve_app(max_queue=2)



def stream(client, **body):
    response = client.post("/voxcpm/stream", json=body)
    return response, pcm_of(response.content) if response.status_code == 200 else None


def upload(client, data: bytes):
    return client.post("/voxcpm/upload", content=data, headers={"Content-Type": "audio/wav"})


def clip_input():
    return decode_audio(VOICE.read_bytes(), max_seconds=60)


def test_design_stream_equals_synthesize_with_headers(client):
    response, pcm = stream(client, text=TEXT, control="A calm voice", seed=1234, max_len=6)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("audio/pcm")
    assert "octet-stream" not in response.headers["content-type"]
    assert response.headers["x-sample-rate"] == str(SAMPLE_RATE)
    assert response.headers["x-channels"] == "1" and response.headers["x-sample-format"] == "s16le"
    assert response.headers["x-seed"] == "1234"
    assert response.headers["x-mode"] == "design"
    want = expected_pcm(SynthesisRequest(TEXT, control="A calm voice", seed=1234, max_len=6))
    assert_same_audio(pcm, want)
    assert pcm.size > 0 and pcm.size % 7680 == 0


def test_random_seed_is_reported_and_reproduces(client):
    first, pcm = stream(client, text=TEXT, max_len=4)
    seed = int(first.headers["x-seed"])
    again, pcm_again = stream(client, text=TEXT, max_len=4, seed=seed)
    assert again.headers["x-seed"] == str(seed)
    assert np.array_equal(pcm, pcm_again)


def test_cloning_by_upload_id_equals_synthesize(client):
    up = upload(client, VOICE.read_bytes())
    assert up.status_code == 200
    info = up.json()
    assert set(info) == {"id", "seconds", "sample_rate", "channels", "expires_in_s"}
    assert info["sample_rate"] == 16000 and info["channels"] == 1
    response, pcm = stream(client, mode="cloning", text=TEXT, reference_id=info["id"], control="Cheerful",
                           seed=7, max_len=5)
    assert response.status_code == 200, response.text
    want = expected_pcm(SynthesisRequest(TEXT, control="Cheerful", reference_audio=clip_input(), seed=7, max_len=5))
    assert_same_audio(pcm, want)


def test_upload_takes_a_multipart_file_field_as_transcribe_does(app, client):
    """The form the transcribe example teaches works on /voxcpm/upload too (it was a misleading
    400 "could not be read as audio"), and stores the very clip the raw body does."""
    raw = upload(client, VOICE.read_bytes()).json()
    form = client.post("/voxcpm/upload", files={"file": ("voice.wav", VOICE.read_bytes(), "audio/wav")})
    assert form.status_code == 200, form.text
    got = form.json()
    assert {k: got[k] for k in ("seconds", "sample_rate", "channels")} == \
        {k: raw[k] for k in ("seconds", "sample_rate", "channels")}
    clips = app.app.state.ctx.clips
    assert np.array_equal(clips.get(got["id"]).audio, clips.get(raw["id"]).audio)
    no_file = client.post("/voxcpm/upload", files={"clip": ("voice.wav", VOICE.read_bytes(), "audio/wav")})
    assert no_file.status_code == 400 and "no file field" in no_file.json()["error"]
    assert "raw body" in no_file.json()["error"]


def test_trim_silence_trims_the_uploaded_clip(client):
    rate, voice = clip_input()
    padded = np.concatenate([np.zeros(rate, np.float32), voice, np.zeros(rate // 2, np.float32)])
    data = io.BytesIO()
    sf.write(data, padded, rate, format="WAV", subtype="FLOAT")
    clip_id = upload(client, data.getvalue()).json()["id"]
    ask = dict(text=TEXT, seed=7, max_len=4)
    response, pcm = stream(client, mode="cloning", reference_id=clip_id, trim_silence=True, **ask)
    assert response.status_code == 200, response.text
    assert_same_audio(pcm, expected_pcm(SynthesisRequest(reference_audio=(rate, padded), trim_silence=True, **ask)))
    _, untrimmed = stream(client, mode="cloning", reference_id=clip_id, **ask)
    assert not np.array_equal(untrimmed, pcm)


def test_an_uploaded_clip_expires_after_its_time():
    import time

    short = serve(Settings.of(upload_ttl_s=1.5))
    try:
        with httpx.Client(base_url=short.url, timeout=60) as own:
            info = upload(own, VOICE.read_bytes()).json()
            assert info["expires_in_s"] == 1.5
            body = dict(mode="cloning", text=TEXT, reference_id=info["id"], seed=1, min_len=0, max_len=1)
            first, _ = stream(own, **body)
            assert first.status_code == 200, first.text
            time.sleep(1.6)
            response, _ = stream(own, **body)
            assert response.status_code == 400 and "expired" in response.json()["error"]
            assert len(short.app.state.ctx.clips) == 0  # gone from memory, not only refused
    finally:
        short.stop()


def test_ultimate_cloning_by_upload_id_equals_synthesize(client):
    clip_id = upload(client, VOICE.read_bytes()).json()["id"]
    response, pcm = stream(client, mode="ultimate", text=TEXT, reference_id=clip_id, prompt_text=VOICE_TEXT,
                           seed=8, max_len=5)
    assert response.status_code == 200, response.text
    clip = clip_input()
    want = expected_pcm(SynthesisRequest(TEXT, reference_audio=clip, prompt_audio=clip, prompt_text=VOICE_TEXT,
                                         seed=8, max_len=5))
    assert_same_audio(pcm, want)


def test_a_dropped_connection_stops_the_engine_within_one_patch(app, client):
    import json
    import socket

    made = []
    for attempt in range(3):
        request_id = f"drop-within-one-{attempt}"
        payload = json.dumps({"text": TEXT, "seed": 3, "min_len": 300, "max_len": 300,
                              "request_id": request_id}).encode()
        host, port = app.url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=30) as sock:
            sock.sendall(b"POST /voxcpm/stream HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                         b"Content-Length: " + str(len(payload)).encode() + b"\r\n\r\n" + payload)
            assert sock.recv(4096).startswith(b"HTTP/1.1 200")
            job = app.worker.get(request_id)
            wait_until(lambda: job.patches >= 3, timeout=20)
            at_close = job.patches
        wait_until(lambda: job.state == "cancelled", timeout=20)
        made.append(job.patches - at_close)
    # The patch being made when the tab closed may finish; no other starts.
    assert max(made) <= 1, f"patches made after the connection dropped: {made}"


def test_closing_the_connection_stops_the_engine(app, client):
    body = {"text": TEXT, "seed": 3, "min_len": 300, "max_len": 300, "request_id": "cancel-by-disconnect"}
    with client.stream("POST", "/voxcpm/stream", json=body) as response:
        assert response.status_code == 200
        next(response.iter_bytes())
    job = app.worker.get("cancel-by-disconnect")
    wait_until(lambda: job.state == "cancelled", timeout=20)
    wait_until(lambda: not app.worker.busy, timeout=20)
    assert job.patches < 300  # it stopped early, not at the length it was asked for
    status = client.get("/voxcpm/jobs/cancel-by-disconnect").json()
    assert status["state"] == "cancelled" and status["outcome"] == "cancelled"


def test_cancel_route_stops_a_stream(app, client):
    body = {"text": TEXT, "seed": 4, "min_len": 300, "max_len": 300, "request_id": "cancel-by-route"}
    with client.stream("POST", "/voxcpm/stream", json=body) as response:
        chunks = response.iter_bytes()
        next(chunks)
        assert client.post("/voxcpm/jobs/cancel-by-route/cancel").status_code == 200
        total = sum(len(c) for c in chunks)  # the body ends instead of running to 300 patches
    assert total < 299 * 7680 * 2
    assert app.worker.get("cancel-by-route").state == "cancelled"


def test_job_status_reports_server_metrics(client):
    response, pcm = stream(client, text=TEXT, seed=5, max_len=4, request_id="status-check-1")
    status = client.get("/voxcpm/jobs/status-check-1").json()
    assert status["state"] == "done" and status["samples"] == pcm.size
    assert status["patches"] * 7680 == pcm.size
    assert status["rtf"] > 0 and status["ttfp_s"] > 0 and status["audio_s"] == pcm.size / SAMPLE_RATE


@pytest.mark.parametrize("body, status, words", [
    ({"text": TEXT, "cfg": 3}, 400, "unknown field 'cfg'"),
    ({"text": "   "}, 400, "text is empty"),
    ({"text": TEXT, "cfg_value": "2"}, 400, "cfg_value"),
    ({"text": TEXT, "cfg_value": 99.0}, 400, "cfg_value"),
    ({"text": TEXT, "inference_timesteps": 0}, 400, "inference_timesteps"),
    ({"text": TEXT, "seed": -1}, 400, "seed"),
    ({"text": TEXT, "mode": "karaoke"}, 400, "mode"),
    ({"text": TEXT, "mode": "cloning"}, 400, "reference clip"),
    ({"text": TEXT, "mode": "cloning", "reference_id": "nope"}, 400, "expired"),
    ({"text": TEXT, "reference_id": "x"}, 400, "not used in voice design"),
    ({"text": TEXT, "trim_silence": True}, 400, "voice design has none"),
    ({"text": TEXT, "trim_silence": "yes"}, 400, "trim_silence"),
    ({"text": TEXT, "request_id": "../../etc"}, 400, "request_id"),
    ({"text": TEXT, "reference_audio": "/etc/passwd"}, 400, "unknown field"),
    ({"text": "x" * 30000}, 400, "the limit is"),
    ({"text": "x" * 300_000}, 413, "limit"),
])
def test_bad_requests_get_4xx_json(client, body, status, words):
    response = client.post("/voxcpm/stream", json=body)
    assert response.status_code == status
    assert response.headers["content-type"].startswith("application/json")
    assert words in response.json()["error"]



def test_a_refusal_is_logged_with_what_was_asked(client, caplog):
    caplog.set_level("INFO", logger="voxcpm.http")
    client.post("/voxcpm/stream?format=frames", json={"mode": "cloning", "text": TEXT, "voice": "Nobody", "cfg": 3})
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("request refused")]
    assert len(lines) == 1 and f"mode=cloning text_chars={len(TEXT)} voice='Nobody' format='frames' " in lines[0], lines

def test_engine_refusals_come_back_as_4xx_before_audio(client):
    clip_id = upload(client, VOICE.read_bytes()).json()["id"]
    response = client.post("/voxcpm/stream", json={"mode": "ultimate", "text": TEXT, "reference_id": clip_id,
                                                   "prompt_text": VOICE_TEXT, "control": "Whisper"})
    assert response.status_code == 400
    assert "error" in response.json()


def test_bad_json_and_bad_uploads(client):
    response = client.post("/voxcpm/stream", content=b"{not json", headers={"Content-Type": "application/json"})
    assert response.status_code == 400 and "JSON" in response.json()["error"]
    for data, words in [(b"", "empty"), (b"RIFF....WAVEfmt nonsense", "could not be read"),
                        (Path(__file__).read_bytes(), "could not be read")]:
        response = upload(client, data)
        assert response.status_code == 400 and words in response.json()["error"]
    silent_long = io.BytesIO()
    sf.write(silent_long, np.zeros(16000 * 61, np.float32), 16000, format="WAV")
    response = upload(client, silent_long.getvalue())
    assert response.status_code == 400 and "limit" in response.json()["error"]
    assert client.get("/voxcpm/jobs/never-was-a-job").status_code == 404


def test_full_queue_answers_503(app, client):
    def hold(request_id):
        body = {"text": TEXT, "seed": 9, "min_len": 300, "max_len": 300, "request_id": request_id}
        return client.build_request("POST", "/voxcpm/stream", json=body)

    # Busy means every row and the waiting line are taken: one stream over HTTP, then the other
    # rows and the line (max_queue=2) filled with long requests.
    with httpx.Client(base_url=app.url, timeout=120) as other:
        running = other.send(hold("queue-running"), stream=True)
        fill = app.worker.rows - 1 + app.worker.max_queue
        held = [app.worker.submit(SynthesisRequest(TEXT, seed=s, min_len=300, max_len=300)) for s in range(fill)]
        response = client.post("/voxcpm/stream", json={"text": TEXT})
        assert response.status_code == 503 and "busy" in response.json()["error"]
        assert response.headers["retry-after"]
        for job in held:
            job.cancel()
        running.close()
    wait_until(lambda: not app.worker.busy, timeout=20)


def test_health(client):
    data = client.get("/voxcpm/health").json()
    assert data["ok"] is True and data["sample_rate"] == SAMPLE_RATE


def test_spec_is_the_one_spec_of_the_modes(client):
    """What the page reads for its modes, sliders and help: modes.spec_json(), as JSON, with the
    served rate, prebuffer and limits (the page writes none of them itself)."""
    response = client.get("/voxcpm/spec")
    assert response.status_code == 200
    served = response.json()
    own = {k: served.pop(k) for k in ("sample_rate", "patch_samples", "prebuffer_ms", "frames", "workbench", "limits",
                                      "openai")}
    assert served == json.loads(json.dumps(modes.spec_json()))
    assert set(served["modes"]) == {"design", "cloning", "ultimate"}
    defaults = Settings()
    assert own == {"sample_rate": SAMPLE_RATE, "patch_samples": 7680, "prebuffer_ms": defaults.page.prebuffer_ms,
                   # the framed stream's format, which the page's reader takes from here (static/player/frames.js)
                   "frames": {"media_type": "application/vnd.voxcpm.frames", "header_bytes": 8, "max_payload": 1 << 20,
                              "kinds": {"A": "audio", "M": "meta", "S": "status", "W": "words"}},
                   "workbench": dataclasses.asdict(defaults.workbench),
                   "limits": {"max_text_chars": LIMITS.max_text_chars, "max_audio_seconds": LIMITS.max_audio_seconds,
                              "max_output_seconds": LIMITS.max_output_seconds,
                              "max_upload_mb": defaults.http.max_upload_mb},
                   # /v1's formats, each with the rates it may be sent at (sample_rate), and pcm's default
                   "openai": {"formats": {"wav": [8000, 16000, 22050, 24000, 44100, 48000],
                                          "pcm": [8000, 16000, 22050, 24000, 44100, 48000],
                                          "flac": [8000, 16000, 22050, 24000, 44100, 48000],
                                          "mp3": [8000, 16000, 22050, 24000, 44100, 48000],
                                          "opus": [8000, 16000, 24000, 48000]},
                              "pcm_rate": 24000}}
