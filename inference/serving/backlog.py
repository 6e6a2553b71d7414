"""How much generated audio may wait unread: per job, and across every job the worker holds.

Audio waits in a job's channel until its consumer reads it; a client that stops reading (or never
starts) leaves it there, finished jobs included, until the connection goes. A limit per job alone
lets many such clients together pin any amount of memory (five of them held 50-65 MB), so there
is also a budget for all jobs together. Over it, a job stops as soon as it is itself behind (its
consumer has not taken the previous patch), so a client that keeps up finishes while the server
is full and one that does not adds at most a patch to the total.

The worker asks `check` after each patch it hands a job; the message is what the job's client
is told. Kept apart from worker.py so that a batched engine asks it the same way.
"""
from __future__ import annotations

import logging
from typing import Callable

log = logging.getLogger("voxcpm.worker")

FELL_BEHIND = ("Stopped: the connection fell more than {seconds:g} s of audio behind the generation, "
               "so the rest was not made.")
SERVER_FULL = ("Stopped: the server holds as much unread audio as it allows ({seconds:g} s across all "
               "connections) and this connection was not keeping up, so the rest was not made.")


class UnreadBudget:
    def __init__(self, sample_rate: int, per_job_s: float, total_s: float, unread_patches: Callable[[], int]):
        """unread_patches(): patches waiting unread across every job the worker lists (running and
        finished), as `patches_waiting` counts them; asked only when a job is itself behind."""
        self.sample_rate, self.per_job_s, self.total_s = sample_rate, per_job_s, total_s
        self.unread_patches = unread_patches

    def check(self, job, chunk_samples: int) -> str | None:
        """None while `job` may go on; else why it must stop. Patches are of equal length, so
        unread audio is counted in patches of `chunk_samples`."""
        rate = self.sample_rate
        if job.unread_chunks() * chunk_samples > self.per_job_s * rate:
            return FELL_BEHIND.format(seconds=self.per_job_s)
        if job.unread_chunks() <= 1:  # its consumer has everything but the patch just made
            return None
        total = self.unread_patches() * chunk_samples
        if total <= self.total_s * rate:
            return None
        log.warning("stopping request %s: %.1f s of audio wait unread across all connections, over the "
                    "budget of %g s, and this one is %d patches behind", job.id, total / rate, self.total_s,
                    job.unread_chunks())
        return SERVER_FULL.format(seconds=self.total_s)


def patches_waiting(job) -> int:
    """Patches of audio in the job's channel: a finished job's last event is its end, not audio."""
    waiting = job.unread_chunks()
    return waiting if job.live else max(0, waiting - 1)
