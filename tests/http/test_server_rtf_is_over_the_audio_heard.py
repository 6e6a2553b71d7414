"""The page's server RTF (static/player/run.js, the panel's figure, its pace bar and each take's
server_rtf) is the server's generation time over the audio as heard (issue 58 item 4): at a speed
other than 1 the speech is stretched, and the status frame's own `rtf` is over the model's audio
(documented so in docs/api.md), which at speed 1.26 read 3.876 where the client's clock read 4.899.
Fed a real framed stream of the served app, in Node, as the page reads it."""
from __future__ import annotations

import httpx
import pytest

from ui.http.frames import AUDIO, META, STATUS

from ..fixtures.frames import read_frames
from ..support.app_helpers import SAMPLE_RATE
from ..support.node_module import HAS_NODE, call

if not HAS_NODE:
    pytest.skip("node is needed to run the page's JavaScript", allow_module_level=True)

# A pause, which no speed stretches: the audio heard is not the model's over the speed either.
BODY = {"text": "One. [pause 300ms] Two, and three.", "control": "A calm voice", "seed": 3, "max_len": 6}


def framed(app, speed: float):
    with httpx.Client(base_url=app.url, timeout=120) as http:
        frames = read_frames(http.post("/voxcpm/stream?format=frames", json={**BODY, "speed": speed}).content)
    heard_s = sum(p.size for kind, p in frames if kind == AUDIO) / SAMPLE_RATE
    assert frames[-1][0] == STATUS
    return [p for kind, p in frames if kind == META], frames[-1][1], heard_s


@pytest.mark.parametrize("speed", [0.5, 1.26, 1.0])
def test_the_server_rtf_of_a_take_is_its_generation_time_over_the_audio_heard(app, speed):
    metas, final, heard_s = framed(app, speed)
    assert final["speed"] == speed and final["generation_s"] > 0
    assert call("player/run.js", "heardRtf", final, metas, SAMPLE_RATE) == \
        pytest.approx(final["generation_s"] / heard_s, rel=1e-6)

