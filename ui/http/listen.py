"""The one reader of a job's audio: what its listener hears, for every door that sends it.

POST /voxcpm/stream (bare PCM or frames), POST /v1/audio/speech (any format, SSE or not), the
live-text WebSocket and Gradio's /generate and /generate_stream all take a job's audio from
`heard()`, so every door sends the same samples, placed the same way: each door keeps only its
body -> request (ui/http/common.admit) and its bytes -> wire.

What a listener hears: the engine's chunks stretched to the request's pace and resampled to the
rate asked (inference/request/listener.Output; the stretch and a long pause's resampling off the
event loop, a patch's resampling on it, where it costs less than a hand-off to a thread), then the stretch's tail once the job has
ended; each piece with its place in the audio sent, the one count of what went out, from which
frames, words and a live session's sentences are placed.

No thread waits for a job: the worker's thread wakes the waiting coroutine through the loop's
doorbell after each event it puts (Job.watch), so any number of streams wait without taking a
thread from anyio's limiter.
"""
from __future__ import annotations

import asyncio
import functools
from dataclasses import dataclass
from typing import AsyncIterator

import anyio
import numpy as np
from fastapi.responses import StreamingResponse

from inference.serving.job import Delivery, Job

from .doorbell import doorbell
from ..services.audio import to_pcm
from ..services.words import WordTrack


@dataclass(frozen=True)
class Heard:
    """One piece of what the listener hears."""
    audio: np.ndarray  # float32 mono at the rate asked, at the request's pace
    offset: int  # samples of the audio sent before it, at that rate
    delivery: Delivery | None  # the engine's chunk it comes from; None for the last piece (the tail)
    pcm: bytes | None = None  # the audio as int16 bytes, when the step made them and nothing changed it

    @property
    def end(self) -> int:
        """Samples of the audio sent once it is."""
        return self.offset + len(self.audio)

    def int16(self) -> bytes:
        """The audio as the int16 little-endian samples a door sends: the step's, when it made them
        (no NumPy loop on the event loop: each lets go of the GIL, docs/benchmarks.md), else to_pcm's."""
        return self.pcm if self.pcm is not None else to_pcm(self.audio)


async def heard(job: Job, first: Delivery, rate: int | None = None, words: WordTrack | None = None,
                watch: ClientWatch | None = None) -> AsyncIterator[Heard]:
    """The job's audio as its listener hears it, as it is made, from its `first` Delivery (what
    admit() returned): a Heard per chunk, then one with the tail (empty when nothing is stretched
    or resampled) once the job has ended; how it ended is the job's (state, error, status). `rate`:
    the rate sent (default the model's). `words`: follows the audio sent, when the client asked for
    word timestamps. `watch`: the HTTP client's (ClientWatch). Leaving early (the client gone: its
    watch ends the body; Gradio or the socket cancels it) stops a live job within one patch and
    drops audio a finished one still holds."""
    output = job.listener.output(rate)

    async def through(off_loop: bool, fn, *args):
        return await anyio.to_thread.run_sync(fn, *args) if off_loop else fn(*args)
    sent, delivery, waiting = 0, first, Waiting(job, watch)
    try:
        while delivery is not None:
            chunk = delivery.chunk
            audio, pcm = await through(output.works(len(chunk.audio)), output.hear, chunk)
            if words is not None:
                words.add(chunk.segment, audio, chunk.pause, sent)
            yield Heard(audio, sent, delivery, pcm)
            sent += len(audio)
            event = await waiting.next()
            if event is None:  # the client has gone: nobody hears the rest, nor the tail
                return
            delivery = event[1] if event[0] == "chunk" else None
        tail, pcm = await through(output.works(), output.end)
        if words is not None:
            words.finish(tail)
        yield Heard(tail, sent, None, pcm)
    finally:
        waiting.close()
        job.discard()


async def next_event(job: Job, watch: ClientWatch | None = None):
    """The job's next event, or None once the client has gone (the job is then cancelled).
    `watch`: the HTTP client's (ClientWatch), whose going ends the wait at once; None where the
    caller's task is cancelled when its client goes (a Gradio call, a socket's task)."""
    waiting = Waiting(job, watch)
    try:
        return await waiting.next()
    finally:
        waiting.close()


class Waiting:
    """One coroutine's wait for a job's events, set up once for all of them (heard() takes a
    chunk a patch): the worker's thread rings the loop's doorbell after each event it puts."""

    def __init__(self, job: Job, watch: ClientWatch | None):
        self.job, self.watch, self.arrived = job, watch, asyncio.Event()
        self.wake = functools.partial(doorbell(asyncio.get_running_loop()).ring, self.arrived)  # on the worker's thread
        job.watch(self.wake)
        if watch is not None:
            watch.wakes.add(self.arrived.set)

    async def next(self):
        """next_event(), for this job and watch."""
        while True:
            self.arrived.clear()  # before the looks, so an event put after them still wakes the wait below
            if self.watch is not None and self.watch.gone:  # nobody hears what follows: not even the event ready
                self.job.cancel()
                return None
            event = self.job.poll()
            if event is not None:
                return event
            await self.arrived.wait()

    def close(self):
        self.job.unwatch(self.wake)
        if self.watch is not None:
            self.watch.wakes.discard(self.arrived.set)


class ClientWatch:
    """Whether an HTTP client is still connected, known the moment it goes: one wait on its
    connection (the ASGI receive, which says "http.disconnect" when it closes), started once its
    body has been read, closed with its response (WatchedResponse).

    Every streaming request used to look for a closed connection every 50 ms until its first
    audio (Starlette's Request.is_disconnected, an anyio cancel scope built and cancelled per
    look), then have Starlette's StreamingResponse run a task group to wait for the same thing:
    a profile of a burst put a quarter of the event loop's time in that machinery, and the loop's
    time per request is what a burst's intake queues behind. This is one plain task."""

    def __init__(self, receive):
        self.gone = False
        self.wakes: set = set()  # called on the loop when the client goes (next_event's waits)
        self._receive, self._task = receive, None

    def start(self):
        """Once the body is in (before, the wait would take the body's own messages)."""
        self._task = asyncio.ensure_future(self._listen())

    async def _listen(self):
        while (await self._receive())["type"] != "http.disconnect":
            pass  # nothing else can come once the body is in: uvicorn's receive only says it ended
        self.gone = True
        for wake in list(self.wakes):
            wake()

    def close(self):
        if self._task is not None:
            self._task.cancel()


class WatchedResponse(StreamingResponse):
    """A streamed body whose client a ClientWatch follows (the body ends when it goes, through
    next_event): sent without the task group Starlette's StreamingResponse runs per response to
    wait for the disconnect itself."""

    def __init__(self, content, watch: ClientWatch, **kwargs):
        super().__init__(content, **kwargs)
        self.watch = watch

    async def __call__(self, scope, receive, send):
        try:
            await self.stream_response(send)
        finally:
            self.watch.close()
