"""`speed`: the stream time-stretched without changing its pitch, chunk by chunk as it is made.

audiotsm's WSOLA (waveform-similarity overlap-add) keeps its state between calls (read_from /
write_to / flush_to), so each patch is stretched as it arrives and the output does not depend on
where the patches were cut: the joins are those of one continuous stretch, with no gap or click.
Its latency is about one analysis frame; the last frame is pushed through with silence at the end
and the whole output cut to the input's length over the speed, so a 2 s take at speed 0.5 lasts
exactly 4 s. Speed 1.0 is the untouched audio (no stretcher runs).
"""
from __future__ import annotations

import anyio
import numpy as np
from audiotsm import wsola
from audiotsm.io.array import ArrayReader, ArrayWriter

from inference.errors import InputError

from .schema import StreamBody, parse_body

FRAME = 2048  # about 43 ms at 48 kHz: WSOLA's usual 20-50 ms window for speech


class Stretcher:
    """feed(float32 mono chunk) -> the stretched audio ready so far; finish() -> the rest."""

    def __init__(self, speed: float = 1.0):
        self.speed = float(speed)
        self._tsm = None if self.speed == 1.0 else wsola(1, speed=self.speed, frame_length=FRAME)
        self._in = self._out = 0

    @property
    def active(self) -> bool:
        return self._tsm is not None

    def feed(self, audio: np.ndarray) -> np.ndarray:
        if self._tsm is None:
            return audio
        self._in += len(audio)
        return self._counted(self._run(audio))

    async def feed_async(self, audio: np.ndarray) -> np.ndarray:
        """feed, off the event loop when there is work to do (a few ms per patch at low speeds)."""
        return await anyio.to_thread.run_sync(self.feed, audio) if self.active else audio

    def finish(self) -> np.ndarray:
        if self._tsm is None:
            return np.zeros(0, np.float32)
        tail = [self._run(np.zeros(int(FRAME * (2 + self.speed)), np.float32))]
        writer, done = ArrayWriter(1), False
        while not done:
            done = self._tsm.flush_to(writer)[1]
        tail.append(writer.data[0])
        want = max(round(self._in / self.speed) - self._out, 0)
        out = np.concatenate(tail)[:want]
        return self._counted(np.pad(out, (0, want - len(out))))

    def _run(self, audio: np.ndarray) -> np.ndarray:
        reader, writer, finished = ArrayReader(audio[None, :].astype(np.float32)), ArrayWriter(1), False
        while not (finished and reader.empty):
            self._tsm.read_from(reader)
            finished = self._tsm.write_to(writer)[1]
        return writer.data[0]

    def _counted(self, out: np.ndarray) -> np.ndarray:
        self._out += len(out)
        return out.astype(np.float32, copy=False)


def page_parser(framed: bool):
    """The page's body parser for POST /voxcpm/stream: speed is refused with frames, whose offsets
    and sample counts are the model's (ui/http/frames.py); bare PCM is stretched."""
    def parse(raw) -> StreamBody:
        body = parse_body(raw)
        if framed and body.speed != 1.0:
            raise InputError("speed other than 1 is applied to bare PCM (format=pcm) only, not to frames")
        return body
    return parse
