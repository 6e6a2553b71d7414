"""A take cut at the bound on one request's audio (--max-output-seconds) keeps its audio as made,
with its own outcome, and has its offline render (issue 45, item 5): it was recorded as failed,
its latents dropped, so the workbench could not compare it with its render."""
from __future__ import annotations

import io
import json

import httpx
import numpy as np
import soundfile as sf

from ..fixtures.frames import read_frames
from ui.http.frames import AUDIO, STATUS

RATE = 48000


def test_a_cut_take_ends_cut_with_its_audio_and_its_offline_render(serve_app):
    app = serve_app(max_output_seconds=1.0)
    body = {"text": "Hello world, this is a longer test sentence for the voice.", "seed": 4, "min_len": 20, "max_len": 20}
    with httpx.Client(base_url=app.url, timeout=120) as client:
        response = client.post("/voxcpm/stream?format=frames", json=body)
        assert response.status_code == 200, response.text
        frames = read_frames(response.content)
        audio = np.concatenate([p for kind, p in frames if kind == AUDIO])
        kind, final = frames[-1]
        assert kind == STATUS and final["state"] == "cut" and final["outcome"] == "too_long"
        assert "reached 1 s of audio" in final["error"] and audio.size == RATE, "cut at the bound, to the sample"
        job = client.get(f"/voxcpm/jobs/{final['id']}").json()
        assert job["state"] == "cut" and job["output_samples"] == RATE
        offline = client.get(f"/voxcpm/jobs/{final['id']}/offline.wav")
        assert offline.status_code == 200, offline.text
        with sf.SoundFile(io.BytesIO(offline.content)) as wav:
            rendered = wav.read(dtype="int16")
            assert json.loads(wav.comment)["patches"] == 7, "the patches made before the cut (6 and a part)"
        # The render decodes whole patches: the take is its start, to the sample.
        assert np.max(np.abs(rendered[:RATE].astype(np.int32) - audio)) <= 1, "the take is its render's start"
