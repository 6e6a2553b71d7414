"""The offline render of a stream sent at a speed other than 1 (issue 36): made as the stream's
listener heard it (issue 44, item 2: its speed is the take's own, not a parameter), its speech
time-stretched as the stream's was and its pauses as written, so the page's stream == offline
check holds at any speed."""
from __future__ import annotations

import io
import json

import soundfile as sf

from .test_offline import TEXT, _record, difference, framed
from .test_pcm_route import app  # noqa: F401 - the same served app

PATCH = 7680


def test_an_offline_render_of_a_stream_at_a_speed_matches_the_stream(client):
    job_id, stream = framed(client, mode="design", text=TEXT + " [pause 200ms]", seed=5, min_len=6, max_len=6, speed=1.5)
    assert stream.size == round(6 * PATCH / 1.5) + round(0.2 * 48000)
    response = client.get(f"/voxcpm/jobs/{job_id}/offline.wav")
    assert response.status_code == 200, response.text
    with sf.SoundFile(io.BytesIO(response.content)) as wav:
        offline = wav.read(dtype="int16")
        comment = json.loads(wav.comment)
    assert comment["speed"] == 1.5 and comment["samples"] == stream.size and offline.shape == stream.shape
    assert comment["decoded_samples"] == 6 * PATCH + round(0.2 * 48000)
    worst, snr = difference(stream, offline)
    assert snr >= 50, (worst, snr)
    _record(f"A/B stream vs offline at speed 1.5 (tiny model, float32 CPU, 6 patches and a 200 ms pause): "
            f"max abs diff {worst} int16 step(s), SNR {snr:.1f} dB")
    again = client.get(f"/voxcpm/jobs/{job_id}/offline.wav")
    assert again.content == response.content, "cached as it was made"
