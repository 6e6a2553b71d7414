"""The one reader of a job's audio: what its listener hears, for every door that sends it.

POST /voxcpm/stream (bare PCM or frames), POST /v1/audio/speech (any format, SSE or not), the
live-text WebSocket and Gradio's /generate and /generate_stream all take a job's audio from
`heard()`, so every door sends the same samples, placed the same way: each door keeps only its
body -> request (ui/http/common.admit) and its bytes -> wire.

What a listener hears: the engine's chunks stretched to the request's pace and resampled to the
rate asked (inference/request/listener.Output, off the event loop when that costs more than a
copy), then the stretch's tail once the job has ended; each piece with its place in the audio sent,
the one count of what went out, from which frames, words and a live session's sentences are placed.

No thread waits for a job: the worker's thread wakes the waiting coroutine through the loop's
doorbell after each event it puts (Job.watch), so any number of streams wait without taking a
thread from anyio's limiter.
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import AsyncIterator

import anyio
import numpy as np
from fastapi import Request

from inference.serving.job import Delivery, Job

from .doorbell import doorbell
from ..services.words import WordTrack

POLL_S = 0.05  # how often a wait for the first audio looks for a closed connection


@dataclass(frozen=True)
class Heard:
    """One piece of what the listener hears."""
    audio: np.ndarray  # float32 mono at the rate asked, at the request's pace
    offset: int  # samples of the audio sent before it, at that rate
    delivery: Delivery | None  # the engine's chunk it comes from; None for the last piece (the tail)

    @property
    def end(self) -> int:
        """Samples of the audio sent once it is."""
        return self.offset + len(self.audio)


async def heard(job: Job, first: Delivery, rate: int | None = None,
                words: WordTrack | None = None) -> AsyncIterator[Heard]:
    """The job's audio as its listener hears it, as it is made, from its `first` Delivery (what
    admit() returned): a Heard per chunk, then one with the tail (empty when nothing is stretched
    or resampled) once the job has ended; how it ended is the job's (state, error, status). `rate`:
    the rate sent (default the model's). `words`: follows the audio sent, when the client asked for
    word timestamps. Leaving early (the client gone: Starlette, Gradio or the socket cancels the
    body) stops a live job within one patch and drops audio a finished one still holds."""
    output = job.listener.output(rate)

    async def through(fn, *args) -> np.ndarray:
        return await anyio.to_thread.run_sync(fn, *args) if output.works else fn(*args)
    sent, delivery = 0, first
    try:
        while delivery is not None:
            chunk = delivery.chunk
            audio = await through(output.feed, chunk.audio, chunk.pause)
            if words is not None:
                words.add(chunk.segment, audio, chunk.pause, sent)
            yield Heard(audio, sent, delivery)
            sent += len(audio)
            event = await next_event(job, None)
            delivery = event[1] if event[0] == "chunk" else None
        tail = await through(output.finish)
        if words is not None:
            words.finish(tail)
        yield Heard(tail, sent, None)
    finally:
        job.discard()


async def next_event(job: Job, request: Request | None):
    """The job's next event, or None once the client has gone (the job is then cancelled).
    `request`: looked at every POLL_S for a closed connection; None where the caller's task is
    cancelled when its client goes (a streamed body, a Gradio call, a socket's task)."""
    loop = asyncio.get_running_loop()
    bell, arrived = doorbell(loop), asyncio.Event()
    timer, due = None, False

    def wake():  # on the worker's thread
        bell.ring(arrived)

    def look_due():
        # The timer's own flag, not a comparison with loop.time(): uvloop's timers run on libuv's
        # millisecond clock and may fire a hair before loop.time() reaches their float deadline,
        # which left a wait that never looked again (a gone client's job kept its row).
        nonlocal due
        due = True
        arrived.set()
    job.watch(wake)
    try:
        while True:
            arrived.clear()  # before the look, so an event put after it still wakes the wait below
            event = job.poll()
            if event is not None:
                return event
            if due:
                if await request.is_disconnected():
                    job.cancel()
                    return None
                timer, due = None, False
            if request is not None and timer is None:
                # A timer that rings the same bell, not a cancel scope around the wait: every request
                # waits here for its first audio, and a scope cost the loop more than the wait's wakes.
                timer = loop.call_later(POLL_S, look_due)
            await arrived.wait()
    finally:
        job.unwatch(wake)
        if timer is not None:
            timer.cancel()
