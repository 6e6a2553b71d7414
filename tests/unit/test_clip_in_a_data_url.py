"""A clip sent in a body as a data: URL of base64 is decoded a slice at a time (binascii keeps the
GIL for a whole call, so one call for a long clip held the engine's thread), and reads exactly as
base64 says, whatever its length; anything but strict base64 is refused by name."""
from __future__ import annotations

import base64
import os

import pytest

from inference.request.audio_input import BASE64_SLICE
from ui.http.speech_body import ParamError, data_url_bytes


def url_of(data: bytes) -> str:
    return "data:audio/wav;base64," + base64.b64encode(data).decode()


@pytest.mark.parametrize("size", [0, 1, 2, 3, BASE64_SLICE // 4 * 3 - 1, BASE64_SLICE // 4 * 3,
                                  BASE64_SLICE // 4 * 3 + 1, 3 * BASE64_SLICE + 5])
def test_a_clip_of_any_length_reads_as_its_base64_says(size):
    data = os.urandom(size)
    assert data_url_bytes(url_of(data), "ref_audio", 2**30) == data


# Padding may end a clip, so "=" is out of place only before its end.
@pytest.mark.parametrize("where, bad", [(where, bad) for where in ("the first slice", "a later slice", "the last character")
                                        for bad in ("@", "\n", "=") if (where, bad) != ("the last character", "=")])
def test_anything_but_base64_is_refused_wherever_it_stands(where, bad):
    encoded = base64.b64encode(os.urandom(2 * BASE64_SLICE)).decode()
    at = {"the first slice": 8, "a later slice": BASE64_SLICE + 8, "the last character": len(encoded) - 1}[where]
    with pytest.raises(ParamError, match="ref_audio is not valid base64"):
        data_url_bytes("data:audio/wav;base64," + encoded[:at] + bad + encoded[at + 1:], "ref_audio", 2**30)


def test_padding_that_does_not_end_the_clip_is_refused():
    first, second = base64.b64encode(b"ab").decode(), base64.b64encode(b"cd").decode()  # each ends in "="
    with pytest.raises(ParamError, match="not valid base64"):
        data_url_bytes("data:audio/wav;base64," + first + second, "ref_audio", 2**30)
