"""`speed`: the stream time-stretched without changing its pitch, chunk by chunk as it is made.

audiotsm's WSOLA (waveform-similarity overlap-add) keeps its state between calls (read_from /
write_to / flush_to), so each patch is stretched as it arrives and the output does not depend on
where the patches were cut: the joins are those of one continuous stretch, with no gap or click.
Its latency is about one analysis frame; the last frame is pushed through with silence at the end
and the whole output cut to the input's length over the speed, so a 2 s take at speed 0.5 lasts
exactly 4 s. Speed 1.0 is the untouched audio (no stretcher runs).

Frames of 1024 samples (21 ms, two periods of a low voice) advance by 256 in the output, so that
even at speed 4 the frames read from the input still touch (audiotsm leaves gaps, heard as clicks,
once its input hop passes the frame); the alignment search spans +-256 samples, a whole period
down to 94 Hz. audiotsm rounds the input hop to whole samples: the two hops are picked so that
their ratio is the speed within about 1e-4, or a minute would drift by many milliseconds.
"""
from __future__ import annotations

import anyio
import numpy as np
from audiotsm import wsola
from audiotsm.io.array import ArrayReader, ArrayWriter

FRAME, HOP, TOLERANCE = 1024, 256, 256  # samples at 48 kHz; HOP is the largest output hop tried


def hops(speed: float) -> tuple[int, int]:
    """(output hop, input hop): whole samples whose ratio is nearest the speed, input hop <= FRAME."""
    pairs = ((out, round(out * speed)) for out in range(HOP * 3 // 4, HOP + 1) if round(out * speed) <= FRAME)
    return min(pairs, key=lambda pair: (abs(pair[1] / pair[0] - speed), -pair[0]))


class Stretcher:
    """feed(float32 mono chunk) -> the stretched audio ready so far; finish() -> the rest."""

    def __init__(self, speed: float = 1.0):
        self.speed = float(speed)
        self._tsm = None
        if self.speed != 1.0:
            synthesis, analysis = hops(self.speed)
            self._tsm = wsola(1, frame_length=FRAME, synthesis_hop=synthesis, analysis_hop=analysis,
                              tolerance=TOLERANCE)
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
        tail = [self._run(np.zeros(4 * FRAME, np.float32))]  # past the frame and its search window
        writer, done = ArrayWriter(1), False
        while not done:
            done = self._tsm.flush_to(writer)[1]
        tail.append(writer.data[0])
        want = max(round(self._in / self.speed) - self._out, 0)
        out = np.concatenate(tail)[:want]
        return self._counted(np.pad(out, (0, want - len(out))))

    def placed(self, samples: int) -> dict:
        """Where the audio just fed lies in the stretched stream, for its metadata frame: the
        frames' offsets and lengths are those of the audio sent (none to change at speed 1)."""
        return {} if self._tsm is None else {"offset": self._out - samples, "samples": samples, "speed": self.speed}

    def status(self, final: dict) -> dict:
        """The status frame of a stretched stream: the model's figures stand (its samples, its RTF),
        the samples sent are added, and the segment ends are moved to where they fall in them."""
        if self._tsm is None:
            return final
        ends = [round(end / self.speed) for end in final.get("segment_ends", [])]
        return {**final, "speed": self.speed, "output_samples": self._out,
                **({"segment_ends": ends} if "segment_ends" in final else {})}

    def _run(self, audio: np.ndarray) -> np.ndarray:
        reader, writer, finished = ArrayReader(audio[None, :].astype(np.float32)), ArrayWriter(1), False
        while not (finished and reader.empty):
            self._tsm.read_from(reader)
            finished = self._tsm.write_to(writer)[1]
        return writer.data[0]

    def _counted(self, out: np.ndarray) -> np.ndarray:
        self._out += len(out)
        return out.astype(np.float32, copy=False)
