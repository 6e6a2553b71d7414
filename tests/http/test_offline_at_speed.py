"""The offline render of a stream sent at a speed other than 1 (issue 36): asked with the stream's
speed, it is time-stretched as the stream was, so the page's stream == offline check still holds;
without one it is the model's own audio, as before; a speed out of range is refused clearly."""
from __future__ import annotations

import io
import json

import soundfile as sf

from .test_offline import TEXT, _record, difference, framed
from .test_pcm_route import app  # noqa: F401 - the same served app

PATCH = 7680


def test_an_offline_render_at_the_streams_speed_matches_the_stream(client):
    job_id, stream = framed(client, mode="design", text=TEXT, seed=5, min_len=6, max_len=6, speed=1.5)
    assert stream.size == round(6 * PATCH / 1.5)
    plain = client.get(f"/voxcpm/jobs/{job_id}/offline.wav")
    assert plain.status_code == 200 and sf.info(io.BytesIO(plain.content)).frames == 6 * PATCH
    response = client.get(f"/voxcpm/jobs/{job_id}/offline.wav?speed=1.5")
    assert response.status_code == 200, response.text
    with sf.SoundFile(io.BytesIO(response.content)) as wav:
        offline = wav.read(dtype="int16")
        comment = json.loads(wav.comment)
    assert comment["speed"] == 1.5 and comment["samples"] == stream.size and offline.shape == stream.shape
    worst, snr = difference(stream, offline)
    assert snr >= 50, (worst, snr)
    _record(f"A/B stream vs offline at speed 1.5 (tiny model, float32 CPU, 6 patches): max abs diff "
            f"{worst} int16 step(s), SNR {snr:.1f} dB")
    again = client.get(f"/voxcpm/jobs/{job_id}/offline.wav")  # the speed-1 render is still the model's own
    assert again.content == plain.content


def test_an_offline_render_at_a_speed_out_of_range_is_refused_clearly(client):
    job_id, _ = framed(client, mode="design", text=TEXT, seed=5, min_len=2, max_len=2)
    for asked in ("9", "fast", "nan"):
        response = client.get(f"/voxcpm/jobs/{job_id}/offline.wav?speed={asked}")
        assert response.status_code == 400 and "from 0.25 to 4" in response.json()["error"], response.text
