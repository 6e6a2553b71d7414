"""Every OpenAI request and live session checks its response format against what this machine's
libsndfile can write; asking libsndfile takes about 0.4 ms, so it is asked once per process."""
from __future__ import annotations

import soundfile as sf

from ui.services.audio import missing_formats


def test_libsndfiles_formats_are_read_once_not_per_request(monkeypatch):
    asked = []
    real = sf.available_formats
    monkeypatch.setattr(sf, "available_formats", lambda: asked.append(1) or real())
    first = missing_formats()
    assert all(missing_formats() == first for _ in range(3))
    assert len(asked) <= 1, f"libsndfile asked {len(asked)} times for 4 checks"
