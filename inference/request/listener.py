"""A request's listener: whoever hears its stream, and how the model's audio reaches them.

The model makes audio at its own rate and pace. The listener hears speech at the request's speed
(time-stretched, pitch kept, as OpenAI's `speed`), a pause tag's silence as long as the tag says
at any speed, and gets it at the rate it is sent at. Everything that asks how long a stream's audio
lasts, or how far its listener has got, asks the stream's one Listener:

- the scheduler's admission: its slack, how long until the listener's buffer runs dry
  (`release`, `slack`: the engine's side, on its worker thread);
- the serving layer's unread-audio budget: how far the connection that carries the audio is
  behind the listener (`take`, `behind`) and the bound on one request's audio (`room`);
- the job's status: the samples the listener was sent, where each segment ends (`deliver`,
  `sent_samples`);
- the route that sends the audio: `output()`, the one place where the speed touches audio.

The clock: the listener starts playing with their first audio and plays on in real time; a
buffer that runs dry waits for the next audio, as the page's player does, so the clock restarts
from then. Their deadline is when the buffer runs dry; the audio they could have played by the
last release is what a connection that took everything at once could have given them.
"""
from __future__ import annotations

import functools
import math

import numpy as np

FRAME, HOP, TOLERANCE = 1024, 256, 256  # the stretch's frames, in samples at 48 kHz (Output says why)
# How far, in the model's samples, soxr's filter for half the model's rate reaches on either side
# of an output sample: its taps further out are below 1e-7, a 300th of an int16 step.
HALF_REACH = 200


class Listener:
    def __init__(self, speed: float, model_rate: int):
        """speed: 1 plays the model's speech as made; model_rate: the rate the model makes audio at."""
        self.speed, self.model_rate = float(speed), int(model_rate)
        self.rate = self.model_rate  # the rate they are sent at (output() sets it)
        self.halves = False  # the engine makes each patch at half the model's rate too (Engine.start sets it)
        # The clock, in the listener's seconds; written by the engine's thread.
        self.deadline: float | None = None  # when the buffer runs dry, on the scheduler's clock
        self.released_s = 0.0  # the audio released to them, as long as it lasts for them
        self.played_s = 0.0  # what they could have played by the last release
        # Written by the thread of the connection that carries the audio.
        self.taken_s = 0.0
        # What they were sent, counted as the output makes it (the worker's thread): the stretch
        # restarts after each pause, so each run of speech between pauses is rounded on its own.
        self._sent_before_run = 0  # at the model's rate: runs of speech ended, and pauses
        self._run = 0  # the model's samples of the speech run under way

    def anew(self) -> Listener:
        """The same listener before any audio (an offline render heard as the stream was)."""
        return Listener(self.speed, self.model_rate)

    def lasts(self, samples: int, pause: bool = False) -> float:
        """Seconds that `samples` of the model's audio last for the listener."""
        return samples / self.model_rate / (1.0 if pause else self.speed)

    # -- the engine's side ---------------------------------------------------------------------
    def release(self, seconds: float, now: float):
        """Audio lasting `seconds` released to them at `now` (the scheduler's clock)."""
        if seconds <= 0:
            return
        if self.deadline is None:  # their first audio: the clock starts
            self.deadline = now
        self.played_s = self.released_s - max(0.0, self.deadline - now)
        self.deadline = max(now, self.deadline) + seconds
        self.released_s += seconds

    @property
    def playing(self) -> bool:
        return self.deadline is not None

    def slack(self, now: float) -> float | None:
        """Seconds of audio they still have at `now` (negative: the buffer ran dry); None before
        their first audio."""
        return None if self.deadline is None else self.deadline - now

    # -- the connection's side -----------------------------------------------------------------
    def take(self, samples: int, pause: bool = False):
        """The connection took `samples` of the model's audio from the stream's channel."""
        self.taken_s += self.lasts(samples, pause)

    def behind(self) -> float:
        """How far, in their seconds, the connection is behind a listener who took every chunk as
        it came: a burst released at once (a pause, a held segment) is not behind, as nobody
        could have played it yet; a connection that stops reading falls behind a second a second."""
        return max(0.0, self.played_s - self.taken_s)

    # -- what they are sent --------------------------------------------------------------------
    def deliver(self, samples: int, pause: bool = False):
        """A chunk handed to the connection (the worker's thread), counted as the output sends it."""
        if pause:
            self._sent_before_run += self._stretched(self._run) + samples
            self._run = 0
        else:
            self._run += samples

    def room(self, max_seconds: float, pause: bool = False) -> int:
        """The model's samples of a chunk that still fit within `max_seconds` of their audio, to the
        sample of what they are sent."""
        left = round(max_seconds * self.model_rate) - self.sent_samples(self.model_rate)
        if pause or self.speed == 1:
            return max(0, left)
        allowed = left + self._stretched(self._run)  # what the speech run under way may come to
        return max(0, math.floor((allowed + 0.5) * self.speed - 1e-9) - self._run)

    def sent_samples(self, rate: int | None = None) -> int:
        """The samples they were sent so far (once the output's stretch is through), at `rate`
        (default: the rate they are sent at)."""
        at_model = self._sent_before_run + self._stretched(self._run)
        rate = self.rate if rate is None else rate
        return at_model if rate == self.model_rate else round(at_model * rate / self.model_rate)

    def _stretched(self, samples: int) -> int:
        return samples if self.speed == 1 else round(samples / self.speed)

    def output(self, rate: int | None = None) -> Output:
        """The audio as they get it: stretched to their speed and resampled to `rate` (default:
        the model's), chunk by chunk, as the route sends it."""
        self.rate = self.model_rate if rate is None else int(rate)
        return Output(self.speed, self.model_rate, self.rate, self.halves)

    def status(self) -> dict:
        """What the job's status says of them."""
        return {"speed": self.speed, "output_samples": self.sent_samples(), "output_rate": self.rate}


# The longest chunk resampled where it is asked for (half a second at 48 kHz, at most about 0.15 ms
# of soxr's time): a longer one, a pause's silence, goes to a thread (Output.works).
RESAMPLE_HERE = 24000


class Output:
    """feed(float32 chunk at the model's rate, pause) -> the audio ready to send at `rate`;
    finish() -> the rest. Speech is time-stretched to the speed; a pause's silence is not (the
    stretch of the speech before it is finished first, and a new one starts after it).

    The stretch: audiotsm's WSOLA (waveform-similarity overlap-add) keeps its state between calls,
    so each patch is stretched as it arrives and the output does not depend on where the patches
    were cut: the joins are those of one continuous stretch, with no gap or click. Its latency is
    about one analysis frame; the last frame of a run of speech is pushed through with silence and
    the run cut to its input's length over the speed, so 2 s of speech at speed 0.5 last exactly
    4 s. Frames of 1024 samples (21 ms, two periods of a low voice) advance by 256 in the output,
    so that even at speed 4 the frames read from the input still touch (audiotsm leaves gaps, heard
    as clicks, once its input hop passes the frame); the alignment search spans +-256 samples, a
    whole period down to 94 Hz. audiotsm rounds the input hop to whole samples: the two hops are
    picked so that their ratio is the speed within about 1e-4, or a minute would drift.

    The rate: another rate than the model's is made by soxr's streaming resampler, after the
    stretch; it holds back part of each chunk (its filter and its processing blocks: up to 36 ms at
    16 and 24 kHz, 150 ms at 8 kHz) until the next one or the end. At speed 1 and the model's rate
    nothing runs; at speed 1 and half the model's rate (OpenAI's pcm, the live socket), when the
    engine made each patch at that rate too (`halves`), the step's are put together (Halved)."""

    def __init__(self, speed: float, model_rate: int, rate: int, halves: bool = False):
        import soxr

        self.speed = float(speed)
        self._tsm = None  # the stretch of the speech run under way
        self._in = self._out = 0  # the run's samples in, and out of the stretch
        self._half = Halved() if halves and self.speed == 1.0 and 2 * rate == model_rate else None
        self._soxr = None if rate == model_rate or self._half else soxr.ResampleStream(
            model_rate, rate, 1, dtype="float32", quality="HQ")

    @property
    def stretches(self) -> bool:
        return self.speed != 1.0

    @property
    def passes(self) -> bool:
        """Whether it hands each chunk on as it is (speed 1, the model's rate)."""
        return not self.stretches and self._soxr is None and self._half is None

    def hear(self, chunk) -> tuple[np.ndarray, bytes | None]:
        """An engine's AudioChunk as the listener gets it, and the same as int16 bytes when the step
        made them (None: the door converts it)."""
        if self._half is not None:
            return self._half.feed(chunk)
        audio = self.feed(chunk.audio, chunk.pause)
        return audio, chunk.pcm if self.passes else None

    def end(self) -> tuple[np.ndarray, bytes | None]:
        """The rest, once the stream has ended (finish()), and its int16 bytes when already made."""
        return self._half.end() if self._half is not None else (self.finish(), None)

    def works(self, samples: int = 0) -> bool:
        """Whether feeding it `samples` (finishing it, for 0) costs more than handing it to a
        thread: the stretch does (a few ms per patch at low speeds); resampling a patch alone
        takes soxr 20-55 us, where a hand-off to a thread and back costs the caller's event loop
        about 100, but a pause's silence of up to 10 s takes it 1-3 ms (this 2-core machine, 48 kHz
        to 8-44.1 kHz)."""
        return self.stretches or (self._soxr is not None and samples > RESAMPLE_HERE)  # Halved: slices

    def feed(self, audio: np.ndarray, pause: bool = False) -> np.ndarray:
        if not self.stretches:
            out = audio
        elif pause:
            out = np.concatenate([self._end_run(), audio])
        else:
            out = self._stretch(audio)
        return self._resample(out)

    def finish(self) -> np.ndarray:
        tail = self._end_run() if self.stretches else np.zeros(0, np.float32)
        out = self._resample(tail)
        if self._soxr is not None:
            out = np.concatenate([out, self._soxr.resample_chunk(np.zeros(0, np.float32), last=True)])
        return out

    def _stretch(self, audio: np.ndarray) -> np.ndarray:
        if self._tsm is None:
            from audiotsm import wsola

            synthesis, analysis = hops(self.speed)
            self._tsm = wsola(1, frame_length=FRAME, synthesis_hop=synthesis, analysis_hop=analysis,
                              tolerance=TOLERANCE)
            self._in = self._out = 0
        self._in += len(audio)
        return self._counted(self._run(audio))

    def _end_run(self) -> np.ndarray:
        """The rest of the speech run under way: its length is its input's over the speed."""
        if self._tsm is None:
            return np.zeros(0, np.float32)
        from audiotsm.io.array import ArrayWriter

        tail = [self._run(np.zeros(4 * FRAME, np.float32))]  # past the frame and its search window
        writer, done = ArrayWriter(1), False
        while not done:
            done = self._tsm.flush_to(writer)[1]
        tail.append(writer.data[0])
        want = max(round(self._in / self.speed) - self._out, 0)
        out = np.concatenate(tail)[:want]
        self._tsm = None
        return np.pad(out, (0, want - len(out))).astype(np.float32, copy=False)

    def _run(self, audio: np.ndarray) -> np.ndarray:
        from audiotsm.io.array import ArrayReader, ArrayWriter

        reader, writer, finished = ArrayReader(audio[None, :].astype(np.float32)), ArrayWriter(1), False
        while not (finished and reader.empty):
            self._tsm.read_from(reader)
            finished = self._tsm.write_to(writer)[1]
        return writer.data[0]

    def _counted(self, out: np.ndarray) -> np.ndarray:
        self._out += len(out)
        return out.astype(np.float32, copy=False)

    def _resample(self, audio: np.ndarray) -> np.ndarray:
        if self._soxr is None:
            return audio
        return self._soxr.resample_chunk(np.ascontiguousarray(audio, np.float32))


def hops(speed: float) -> tuple[int, int]:
    """(output hop, input hop): whole samples whose ratio is nearest the speed, input hop <= FRAME."""
    pairs = ((out, round(out * speed)) for out in range(HOP * 3 // 4, HOP + 1) if round(out * speed) <= FRAME)
    return min(pairs, key=lambda pair: (abs(pair[1] / pair[0] - speed), -pair[0]))


@functools.cache
def halving_taps(model_rate: int) -> np.ndarray:
    """The filter of soxr's streaming resampler from `model_rate` to half of it (quality HQ), read
    off its answers to two impulses, float64 [2 * HALF_REACH + 1]: half-rate sample m is the sum
    over n of taps[HALF_REACH + 2m - n] * x[n]. Applied to a whole stream with silence on either
    side (decode_step.halve) it gives soxr's samples to within 2e-7, its start and end included:
    the GPU makes them for every row at once, and the resampler stays soxr's."""
    import soxr

    far = 4 * HALF_REACH + 1  # an impulse this far in, and as far from the end, sees all of the filter
    taps = np.zeros(2 * HALF_REACH + 1)
    for odd in (0, 1):
        impulse = np.zeros(2 * far + 2, np.float32)
        impulse[far + odd] = 1.0  # an even and an odd one: each gives every other tap
        stream = soxr.ResampleStream(model_rate, model_rate // 2, 1, dtype="float32", quality="HQ")
        out = np.concatenate([stream.resample_chunk(impulse), stream.resample_chunk(impulse[:0], last=True)])
        for m in range(len(out)):
            k = 2 * m - (far + odd)  # taps[HALF_REACH + k] is what sample m takes from the impulse
            if -HALF_REACH <= k <= HALF_REACH:
                taps[HALF_REACH + k] = out[m]
    return taps


class Halved:
    """The listener's audio at half the model's rate, put together from the step's half-rate
    patches (AudioChunk.half): what soxr's streaming resampler gives for the audio as heard, pauses
    included, to within float rounding, with no filter run here, only slices, so the event loop
    neither resamples nor converts (each NumPy or soxr call lets go of the GIL and waits behind the
    engine's thread to get it back: docs/benchmarks.md).

    The step carries each row's last HALF_REACH * 2 samples from patch to patch, so a patch that
    follows speech comes complete; at a stream's start and after a pause it starts from silence
    (Join.quiet), and its first samples add to the ring the speech before the pause left, which
    after the shortest pause (50 ms) is silence. A chunk cut at the bound on a request's audio ends
    with the step's samples of the patch whole, as resampled before the cut."""

    def __init__(self):
        self.fed = 0  # the model's samples heard so far, pauses included
        self.sent = 0  # half-rate samples handed out
        # Half-rate samples from `sent` on that audio to come may still add to, and their int16
        # bytes (None once a sum made them: the door converts those).
        self.ring, self.ring_pcm = np.zeros(0, np.float32), b""
        self.joined = False  # the last chunk was speech, so the step's next patch carries on from it

    def feed(self, chunk) -> tuple[np.ndarray, bytes | None]:
        if chunk.pause:  # silence: it adds nothing, and the step starts from silence after it
            self.joined = False
        elif chunk.half is None:
            raise RuntimeError("a chunk without its half-rate patch, from an engine that makes them")
        elif self.joined:  # the step's patch carries on from the last, so it starts at `sent`, complete
            self.ring, self.ring_pcm = chunk.half.audio, chunk.half.pcm
        else:
            self._add(self.fed // 2 - HALF_REACH // 2, chunk.half.audio, chunk.half.pcm)
            self.joined = True
        self.fed += len(chunk.audio)
        return self._take(self.fed // 2 - HALF_REACH // 2)  # what no audio to come adds to

    def end(self) -> tuple[np.ndarray, bytes | None]:
        """The last samples: as many in all as the listener's count says (Listener.sent_samples)."""
        return self._take(round(self.fed / 2))

    def _add(self, start: int, audio: np.ndarray, pcm: bytes):
        """Half-rate samples from `start` added to the ring (any before the stream's start dropped)."""
        at = start - self.sent
        if at < 0:
            audio, pcm, at = audio[-at:], pcm[-2 * at:], 0
        self._cover(at)
        ring, ring_pcm = self.ring, self.ring_pcm
        under = ring[at:]
        if not under.any():  # onto silence: the step's samples as they are
            rest = under[len(audio):]
            self.ring = np.concatenate([ring[:at], audio, rest])
            self.ring_pcm = None if ring_pcm is None else ring_pcm[: 2 * at] + pcm + b"\0" * (2 * len(rest))
        else:
            k = min(len(under), len(audio))
            self.ring = np.concatenate([ring[:at], under[:k] + audio[:k], audio[k:], under[k:]])
            self.ring_pcm = None

    def _cover(self, samples: int):
        """The ring made at least `samples` long, with silence."""
        gap = samples - len(self.ring)
        if gap > 0:
            self.ring = np.concatenate([self.ring, np.zeros(gap, np.float32)])
            self.ring_pcm = None if self.ring_pcm is None else self.ring_pcm + b"\0" * (2 * gap)

    def _take(self, upto: int) -> tuple[np.ndarray, bytes | None]:
        k = max(0, upto - self.sent)
        self._cover(k)
        out, self.ring = self.ring[:k], self.ring[k:]
        out_pcm = None if self.ring_pcm is None else self.ring_pcm[: 2 * k]
        self.ring_pcm = None if self.ring_pcm is None else self.ring_pcm[2 * k:]
        self.sent += k
        return out, out_pcm
