"""ui/http/listen.heard reads a stream that is well ahead of its listener in batches: fewer wakes
and writes on the event loop, every sample still sent, the listener's buffer never dry, and the
take's end never held back. The job is a real Job, driven from a thread as the worker drives it."""
from __future__ import annotations

import asyncio
import threading
import time

import numpy as np

from inference.request.request import AudioChunk, SynthesisRequest
from inference.serving.job import Job
from ui.http import listen

RATE, PATCH = 48000, 7680  # 160 ms patches at 48 kHz


class NoLine:
    """The worker's line as a running job sees it: it has left it."""

    def position(self, job: Job) -> int:
        return 0

    def withdraw(self, job: Job) -> None:
        return None


def running_job() -> Job:
    job = Job("j", RATE, NoLine())
    job.accept(SynthesisRequest("A sentence."), prepared=None)
    job.begin()
    job.started()
    return job


def deliver(job: Job, index: int):
    job.deliver(AudioChunk(np.full(PATCH, 0.01 * (index % 7), np.float32), None, index))


def make(job: Job, patches: int, every_s: float):
    """The worker: a patch every `every_s` (faster than real time), then the end."""
    for i in range(patches):
        deliver(job, i)
        time.sleep(every_s)
    job.finish("done")
    job.hang_up()


async def read(job: Job) -> list[tuple[float, int, bool, int]]:
    """(loop time, samples, more, first sample's value) of every piece, as a door gets them."""
    loop = asyncio.get_running_loop()
    kind, first = await listen.next_event(job, None)
    assert kind == "chunk"
    pieces = []
    async for piece in listen.heard(job, first):
        pieces.append((loop.time(), len(piece.audio), piece.more, float(piece.audio[0]) if len(piece.audio) else None))
    return pieces


def test_a_stream_well_ahead_comes_in_batches_whole_and_never_dry():
    job, patches = running_job(), 60
    worker = threading.Thread(target=make, args=(job, patches, 0.005))  # 32 times real time
    worker.start()
    pieces = asyncio.run(read(job))
    worker.join()
    audio = [p for p in pieces if p[1]]
    assert len(audio) == patches and sum(p[1] for p in audio) == patches * PATCH
    assert np.allclose([p[3] for p in audio], [0.01 * (i % 7) for i in range(patches)])  # in order, none twice
    writes = [p for p in pieces if not p[2]]  # a door writes once per run of pieces ending with more=False
    assert len(writes) <= patches // 3, f"{len(writes)} writes for {patches} patches: not batched"
    # a player that starts with the first piece and plays in real time never runs dry
    dry = None
    for at, samples, _more, _ in pieces:
        assert dry is None or at <= dry, f"the listener ran dry {1e3 * (at - dry):.0f} ms before this piece"
        dry = max(at, dry or at) + samples / RATE


def test_a_patch_does_not_end_the_gather_but_the_jobs_end_does():
    async def gathered(finish: bool) -> float:
        job = running_job()
        loop = asyncio.get_running_loop()
        if finish:
            threading.Timer(0.05, lambda: (job.finish("done"), job.hang_up())).start()
        else:
            threading.Timer(0.05, deliver, args=(job, 0)).start()
        start = loop.time()
        await listen.gather(job, start + (30.0 if finish else 0.3))
        return loop.time() - start

    assert asyncio.run(gathered(finish=False)) >= 0.29  # a patch came at 50 ms: the gather went on
    assert asyncio.run(gathered(finish=True)) < 5.0  # the end came at 50 ms: not held for 30 s


def test_a_stream_that_keeps_pace_with_its_listener_is_read_patch_by_patch():
    """Batches are only for a listener far ahead: near real time every patch is its own write."""
    job, patches = running_job(), 6
    worker = threading.Thread(target=make, args=(job, patches, 0.12))  # 0.75 of real time: at most 0.36 s ahead
    worker.start()
    pieces = asyncio.run(read(job))
    worker.join()
    assert sum(1 for p in pieces if p[1] and not p[2]) == patches
