"""The offline render behind the page's A/B: a finished job's latents kept within a byte cap and a
TTL, decoded whole on the worker's thread and served as WAV with its INFO metadata; and the
difference between stream and offline measured for every mode (tests/artifacts/ab-figures.txt)."""
from __future__ import annotations

import io
import json
import threading
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from inference.serving.latent_store import LatentStore
from ui.http.frames import AUDIO, MEDIA_TYPE

from ..fixtures.frames import read_frames
from .test_pcm_route import VOICE, VOICE_TEXT, app, upload  # noqa: F401 - the same served app

TEXT = "Hello world, this is a test."


ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"


def _record(line: str):
    ARTIFACTS.mkdir(exist_ok=True)
    with open(ARTIFACTS / "ab-figures.txt", "a", encoding="utf-8") as out:
        out.write(line + "\n")
    print(line)


def test_store_keeps_within_its_cap_and_ttl():
    now = [0.0]
    store = LatentStore(max_bytes=3 * 4096, ttl_s=10.0, clock=lambda: now[0])
    patch = np.zeros((64, 4), np.float32)  # 1 KiB
    assert store.keep("a", [patch] * 2, None) and store.keep("b", [patch] * 1, None)
    assert not store.keep("empty", [], None) and not store.keep("huge", [patch] * 13, None)
    assert store.keep("c", [patch] * 8, np.zeros((3, 4, 64), np.float32))  # 11 KiB: a goes
    assert store.get("a") is None and store.get("b") is not None and store.nbytes <= store.max_bytes
    assert store.get("c").latents.shape == (8, 64, 4) and store.get("c").context.shape == (3, 4, 64)
    now[0] = 10.0
    assert store.get("b") is None and store.get("c") is None and len(store) == 0 and store.nbytes == 0


@pytest.fixture(scope="module", autouse=True)
def fresh_figures():
    (ARTIFACTS / "ab-figures.txt").unlink(missing_ok=True)


def framed(client, **body) -> tuple[str, np.ndarray]:
    response = client.post("/voxcpm/stream", json=body, headers={"Accept": MEDIA_TYPE})
    assert response.status_code == 200, response.text
    audio = np.concatenate([v for k, v in read_frames(response.content) if k == AUDIO])
    return response.headers["x-request-id"], audio


def difference(stream: np.ndarray, offline: np.ndarray) -> tuple[int, float]:
    """Max absolute difference in int16 steps, and the SNR of the stream against the offline render."""
    s, o = stream.astype(np.float64), offline.astype(np.float64)
    noise = np.sum((s - o) ** 2)
    snr = float("inf") if noise == 0 else 10 * np.log10(np.sum(o ** 2) / noise)
    return int(np.max(np.abs(s - o))), snr


@pytest.mark.parametrize("mode", ["design", "cloning", "ultimate"])
def test_offline_render_matches_the_stream(client, mode):
    body = {"mode": mode, "text": TEXT, "seed": 5, "min_len": 6, "max_len": 6}
    if mode != "design":
        body["reference_id"] = upload(client, VOICE.read_bytes()).json()["id"]
    if mode == "ultimate":
        body["prompt_text"] = VOICE_TEXT
    job_id, stream = framed(client, **body)
    response = client.get(f"/voxcpm/jobs/{job_id}/offline.wav")
    assert response.status_code == 200 and response.headers["content-type"] == "audio/wav"
    with sf.SoundFile(io.BytesIO(response.content)) as wav:
        offline = wav.read(dtype="int16")
        assert wav.samplerate == 48000 and wav.title.startswith("VoxCPM2 offline render")
        comment = json.loads(wav.comment)
    assert comment["job"] == job_id and comment["patches"] == 6 and offline.shape == stream.shape
    worst, snr = difference(stream, offline)
    # Equal up to float rounding before the int16 step: at most one step apart.
    assert worst <= 1 and snr > 60, (worst, snr)
    _record(f"A/B stream vs offline, {mode} (tiny model, float32 CPU, 6 patches): max abs diff "
                  f"{worst} int16 step(s) ({worst / 32767:.1e} full scale), SNR {snr:.1f} dB")


def test_offline_render_of_an_unknown_or_forgotten_job_is_a_clear_404(client):
    response = client.get("/voxcpm/jobs/nosuchjob123/offline.wav")
    assert response.status_code == 404 and "kept for 30 min" in response.json()["error"]


def test_the_decode_runs_on_the_worker_thread(app):
    worker = app.worker
    threads = worker.call(lambda engine: threading.current_thread()).result(timeout=30)
    assert threads is worker._thread
    with pytest.raises(ZeroDivisionError):
        worker.call(lambda engine: 1 / 0).result(timeout=30)
    assert worker.call(lambda engine: engine.sample_rate).result(timeout=30) == 48000  # it goes on serving
