"""A finished job's offline render: the whole-sequence VAE decode of the latents its stream was
decoded from (Engine.decode_whole), as a WAV carrying what it is in its RIFF INFO chunk.

The page's A/B compares a take with this render, so "stream == offline" is measured, not assumed.
The decode runs on an engine's worker thread (the one thread that owns it), queued between two
steps; the route only awaits its future, so the event loop never blocks on it.
"""
from __future__ import annotations

import asyncio
import io
import json

import numpy as np
import soundfile as sf
import torch

SOFTWARE = "VoxCPM2 streaming demo"


def wav_bytes(audio: np.ndarray, rate: int, title: str, comment: dict) -> bytes:
    """16-bit mono WAV of float audio in [-1, 1], rounded as the stream rounds it (ui/http/common.to_pcm),
    with a title, the software and a JSON comment in its INFO chunk (libsndfile writes them)."""
    pcm = np.clip(np.rint(np.asarray(audio, dtype=np.float64) * 32767.0), -32768, 32767).astype(np.int16)
    out = io.BytesIO()
    with sf.SoundFile(out, "w", samplerate=rate, channels=1, subtype="PCM_16", format="WAV") as wav:
        wav.title, wav.software = title, SOFTWARE
        wav.comment = json.dumps(comment, separators=(",", ":"), ensure_ascii=False)
        wav.write(pcm)
    return out.getvalue()


def _decode(kept):
    context = None if kept.context is None else torch.from_numpy(kept.context)
    return lambda engine: engine.decode_whole(kept.latents, context)


async def render_offline(worker, kept, job_id: str) -> bytes:
    """The WAV of a kept job's offline render; awaits the decode on a worker thread."""
    audio = await asyncio.wrap_future(worker.call(_decode(kept)))
    rate = int(worker.sample_rate)
    comment = {"job": job_id, "render": "offline: whole-sequence VAE decode of the streamed latents",
               "patches": int(kept.latents.shape[0]), "samples": int(audio.shape[0]), "sample_rate": rate}
    return wav_bytes(audio, rate, f"VoxCPM2 offline render {job_id}", comment)
