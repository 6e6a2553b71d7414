"""A job's channel: the worker's thread puts each chunk and the end, one consumer takes them, by an
event loop's poll (which takes no lock) or a thread's blocking wait (inference/serving/job.py)."""
import threading
import time

import numpy as np

from inference import SynthesisRequest
from inference.request.request import AudioChunk
from inference.serving.job import Job


class NoLine:
    def position(self, job) -> int:
        return 0

    def withdraw(self, job) -> None:
        pass


def running_job() -> Job:
    job = Job("j1", 16000, NoLine())
    job.accept(SynthesisRequest(text="Hello."), prepared=None)
    job.begin()
    job.started()
    return job


def chunk(index: int, samples: int = 160) -> AudioChunk:
    return AudioChunk(np.full(samples, index, np.float32), index=index, segment=0, latents=None)


def test_a_poll_finds_nothing_then_every_chunk_in_order_then_the_end():
    job = running_job()
    assert job.poll() is None
    for i in range(3):
        job.deliver(chunk(i))
    job.finish("done")
    job.hang_up()
    got = [job.poll() for _ in range(5)]
    assert [e[0] for e in got] == ["chunk", "chunk", "chunk", "end", "end"]
    assert [int(e[1].chunk.audio[0]) for e in got[:3]] == [0, 1, 2]
    assert job.unread_samples() == 0 and job.unread_chunks() == 0


def test_a_waiting_thread_wakes_for_a_chunk_put_later_and_a_wait_with_nothing_coming_times_out():
    job = running_job()
    started = time.monotonic()
    assert job.next_event(timeout=0.05) is None and time.monotonic() - started >= 0.05
    got = []
    waiter = threading.Thread(target=lambda: got.append(job.next_event(timeout=10)))
    waiter.start()
    time.sleep(0.05)
    job.deliver(chunk(7))
    waiter.join(5)
    assert not waiter.is_alive() and got[0][0] == "chunk" and int(got[0][1].chunk.audio[0]) == 7


def test_a_consumer_thread_takes_everything_a_producer_thread_puts_none_lost_or_reordered():
    job, n = running_job(), 3000
    taken = []

    def consume():
        while (event := job.next_event(timeout=10)) is not None and event[0] == "chunk":
            taken.append(int(event[1].chunk.audio[0]))

    consumer = threading.Thread(target=consume)
    consumer.start()
    for i in range(n):
        job.deliver(chunk(i, samples=4))
    job.finish("done")
    job.hang_up()
    consumer.join(20)
    assert taken == list(range(n)) and job.unread_samples() == 0
