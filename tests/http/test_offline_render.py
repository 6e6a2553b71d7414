"""The offline render of a long job in bounded memory and without holding up live streams: the
latents decoded a few patches per call (equal to the whole decode), the WAV sent as it is made,
calls taken one per step, a render decoded once for every GET of it, and the caps on renders."""
from __future__ import annotations

import io
import json
import threading
import tracemalloc

import httpx
import numpy as np
import pytest
import soundfile as sf
import torch

from inference.runtime.decode_step import patches_to_frames
from inference.runtime.offline import OfflineDecode
from ui.services.audio import pcm16
from ui.settings import DEFAULTS

from ..support.app_helpers import load_engine, reference_engine, wait_until

PIECE_PATCHES = DEFAULTS.renders.piece_patches

P = 4  # the tiny model's patch size (frames per patch)
PATCH_SAMPLES = 4 * 1920


@pytest.fixture(scope="module")
def app(serve_app):
    """The app on an engine whose VAE decoder reports each call: ("stream", rows) for a step's
    streaming decode, ("offline", frames) for a piece of an offline render."""
    engine = load_engine()
    events: list[tuple[str, int]] = []

    def seen(module, args, kwargs):
        z = args[0]
        events.append(("stream", z.shape[0]) if kwargs.get("streaming") else ("offline", z.shape[-1]))

    engine.vae.decoder.register_forward_pre_hook(seen, with_kwargs=True)
    running = serve_app(max_queue=4, engine=engine)
    running.events = events
    yield running


def latents(seed: int, patches: int) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal((patches, 64, P)) * 0.5).astype(np.float32)


def whole_decode(lat: np.ndarray, context: torch.Tensor | None = None) -> np.ndarray:
    """The decode of every frame in one call, from silence (the reference), context samples cut."""
    patches = torch.from_numpy(lat).transpose(1, 2)
    if context is not None:
        patches = torch.cat((context, patches))
    with torch.inference_mode():
        audio = reference_engine().vae.decode(patches_to_frames(patches[None]))[0].numpy()
    return audio[0 if context is None else len(context) * PATCH_SAMPLES:]


def test_pieces_equal_the_whole_decode_and_decode_a_few_patches_at_a_time():
    engine = reference_engine()
    lat, context = latents(1, 40), torch.from_numpy(latents(2, 3)).transpose(1, 2).contiguous()
    frames: list[int] = []
    hook = engine.vae.decoder.register_forward_pre_hook(lambda m, args: frames.append(args[0].shape[-1]))
    try:
        decode = OfflineDecode(lat, context, piece_patches=5)
        pieces = []
        while not decode.done:
            pieces.append(decode.decode_next(engine.vae, torch.float32, engine.device))
    finally:
        hook.remove()
    assert frames == [5 * P] * 8 + [3 * P] and decode.samples == 40 * PATCH_SAMPLES
    assert len(pieces[0]) == 2 * PATCH_SAMPLES  # the first piece's 3 context patches cut
    got, want = np.concatenate(pieces), whole_decode(lat, context)
    assert got.shape == want.shape and np.max(np.abs(got - want)) < 1e-5


def test_a_long_render_streams_in_bounded_memory_and_equals_the_whole_decode(app):
    store = app.app.state.ctx.latents
    lat = latents(3, 250)  # 40 s of audio: a 3.8 MB WAV, 14 MB as float64 at once
    want = pcm16(whole_decode(lat))
    store.keep("long", list(lat), None)
    store.max_render_bytes = 2**20  # too long for the cache: decoded for its reader, parts dropped once read
    before = len(app.events)
    tracemalloc.start()
    try:
        body, seen = bytearray(), 0
        with httpx.Client(base_url=app.url, timeout=120) as client:
            with client.stream("GET", "/voxcpm/jobs/long/offline.wav") as response:
                assert response.status_code == 200 and response.headers["content-type"] == "audio/wav"
                for part in response.iter_bytes():
                    if len(body) < 4096:  # the header, and the first samples
                        body += part
                    seen += len(part)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        store.max_render_bytes = 64 * 2**20
    frames = [f for kind, f in app.events[before:] if kind == "offline"]
    assert max(frames) <= PIECE_PATCHES * P and sum(frames) == 250 * P
    assert peak < 4 * 2**20, f"the render allocated {peak / 2**20:.1f} MB at its peak"
    assert seen == int(response.headers["content-length"]) and store.render("long") is None
    full = _fetch(app, "long")  # again, whole, for the comparison
    with sf.SoundFile(io.BytesIO(full)) as wav:
        got = wav.read(dtype="int16")
        assert json.loads(wav.comment)["samples"] == 250 * PATCH_SAMPLES and wav.samplerate == 48000
    diff = np.abs(got.astype(np.int32) - np.frombuffer(want, "<i2").astype(np.int32))
    assert got.size == 250 * PATCH_SAMPLES and diff.max() <= 1
    assert full[:len(body)] == bytes(body)


def _fetch(app, job_id: str) -> bytes:
    response = httpx.get(f"{app.url}/voxcpm/jobs/{job_id}/offline.wav", timeout=120)
    assert response.status_code == 200, response.text
    return response.content


def test_repeated_gets_of_a_render_decode_it_once(app):
    store = app.app.state.ctx.latents
    store.keep("again", list(latents(4, 30)), None)
    before = len(app.events)
    together: list[bytes] = []
    threads = [threading.Thread(target=lambda: together.append(_fetch(app, "again"))) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    later = [_fetch(app, "again") for _ in range(3)]
    assert sum(f for kind, f in app.events[before:] if kind == "offline") == 30 * P  # one decode in all
    assert len(set(together + later)) == 1 and store.render("again") == later[0]


def test_renders_do_not_hold_up_a_live_stream(app):
    """Between two patches of a live stream the engine decodes at most one piece of a render,
    however many renders run; a client beyond its share of renders gets a 429."""
    store = app.app.state.ctx.latents
    for k in range(3):
        store.keep(f"busy{k}", list(latents(10 + k, 150)), None)
    streamed: list[httpx.Response] = []
    body = {"mode": "design", "text": "Hello world, this is a test.", "seed": 1, "min_len": 40, "max_len": 40}
    stream = threading.Thread(target=lambda: streamed.append(httpx.post(f"{app.url}/voxcpm/stream", json=body,
                                                                         timeout=120)))
    start = len(app.events)
    stream.start()
    wait_until(lambda: any(kind == "stream" for kind, _ in app.events[start:]), timeout=60)
    renders = [threading.Thread(target=_fetch, args=(app, f"busy{k}")) for k in range(2)]
    for thread in renders:
        thread.start()
    slots = app.app.state.ctx.renders.slots
    wait_until(lambda: sum(slots.readers.values()) == 2, timeout=60)  # both being read
    refused = httpx.get(f"{app.url}/voxcpm/jobs/busy2/offline.wav", timeout=60)
    stream.join()
    for thread in renders:
        thread.join()
    assert streamed[0].status_code == 200 and refused.status_code == 429 and refused.headers["retry-after"]
    gaps, between, patches = [], 0, 0
    for kind, frames in app.events[start:]:
        if kind == "stream":
            gaps.append(between)
            between, patches = 0, patches + 1
        elif patches < 40:
            between += frames
    assert patches >= 40 and sum(gaps) > 0, "no render ran while the stream did: the test proves nothing"
    assert max(gaps) <= PIECE_PATCHES * P, f"a patch of the stream waited for {max(gaps) // P} patches of renders"
