"""Issue 9, item 3: one client cannot push other clients' clips out of the store. Clients are told
apart by address (X-Forwarded-For from 127.0.0.1, which uvicorn trusts from a loopback proxy);
all traffic goes to 127.0.0.1."""
from __future__ import annotations

from pathlib import Path

import httpx

from .test_bad_input_gets_clear_message import encode, tone

VOICE = Path(__file__).resolve().parents[2] / "assets" / "voices" / "guide_en.wav"
TINY = encode(tone(0.12, 8000), 8000)  # about 2 KB: the cheapest clip the store accepts


def as_client(app, address: str) -> httpx.Client:
    return httpx.Client(base_url=app.url, timeout=60, headers={"X-Forwarded-For": address})


def test_a_flood_of_uploads_evicts_nobody_else(app, caplog):
    caplog.set_level("WARNING", logger="voxcpm")
    with as_client(app, "198.51.100.7") as victim, as_client(app, "203.0.113.66") as attacker:
        mine = victim.post("/voxcpm/upload", content=VOICE.read_bytes()).json()["id"]
        answers = [attacker.post("/voxcpm/upload", content=TINY) for _ in range(272)]
        stream = victim.post("/voxcpm/stream", json={"mode": "cloning", "text": "Hello.", "reference_id": mine,
                                                     "seed": 1, "max_len": 2})
        assert stream.status_code == 200, stream.text  # the victim's clip survived
        codes = [a.status_code for a in answers]
        assert codes[:16] == [200] * 16 and set(codes[16:]) == {429}
        refusal = answers[-1].json()["error"]
        assert "16 clips stored" in refusal and "expires 30 min" in refusal and answers[-1].headers["retry-after"]
        assert "refused a clip from 203.0.113.66" in caplog.text
        # Another client still has its own share.
        assert victim.post("/voxcpm/upload", content=TINY).status_code == 200


def test_ipv6_clients_share_by_64_prefix(app):
    with as_client(app, "2001:db8:1:2::1") as first, as_client(app, "2001:db8:1:2::ffff") as second:
        for _ in range(16):
            assert first.post("/voxcpm/upload", content=TINY).status_code == 200
        assert second.post("/voxcpm/upload", content=TINY).status_code == 429


def test_a_full_server_refuses_instead_of_evicting(app):
    clips = app.app.state.ctx.clips
    held = len(clips)
    clips.max_clips = held + 1
    try:
        with as_client(app, "192.0.2.1") as one, as_client(app, "192.0.2.2") as two:
            assert one.post("/voxcpm/upload", content=TINY).status_code == 200
            full = two.post("/voxcpm/upload", content=TINY)
            assert full.status_code == 503 and "as many clips as it can" in full.json()["error"]
        assert len(clips) == held + 1
    finally:
        clips.max_clips = 256
