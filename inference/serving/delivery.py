"""What the worker hands a running job, on its own thread after each engine step: the chunks its
stream made in the step (what Engine.step returned for it), its latents kept for the offline
render, its text's progress; the check that its consumer keeps up (the unread-audio budget); and,
when it fails, what its consumer is told.

Unread audio. Audio waits in a job's channel until its consumer reads it; a client that stops
reading (or never starts) leaves it there, finished jobs included, until the connection goes. A
limit per job alone lets many such clients together pin any amount of memory (five of them held
50-65 MB), so there is also a budget for all jobs together. Whether a consumer keeps up is judged
against the listener's clock (inference/request/listener.py), not by counting chunks: it is behind
by what a listener who took each patch as it came could have played since the first one, less
what it took. A pause's silence or a segment released at once lands as a burst in one step, and nobody
could have played it yet, so a reader is never behind for it. A job stops when it is more than the
per-job limit behind, or when all jobs together hold more unread audio than the budget and it is
itself behind (by more than KEEP_UP_S): a client that keeps up finishes while the server is full,
and one that stops reading adds what its stream makes in KEEP_UP_S of wall time (and a step) before
it is stopped.

Output. One request may produce at most `max_output_seconds` of audio as its listener hears it,
speech and silence together (Limits): the engine refuses a text whose pauses alone pass it
(Engine.prepare), and the rest is cut here, at the bound, with its own outcome and message.

Failures. One request's failure must not take the worker down, and its consumer must not see the
server's internals: input errors keep their own message (it says what to change), a consumer that
fell behind is told so, and anything else becomes a generic message while the traceback goes to
the log. An out-of-memory failure also gives back what the failed request held.
"""
from __future__ import annotations

import gc
import logging
import traceback
from typing import Callable

import torch

from ..errors import InputError
from ..request.request import AudioChunk
from ..runtime.cuda_graphs import CAPTURE_LOCK
from .job import Job

log = logging.getLogger("voxcpm.worker")


def hand_over(job: Job, chunks: list[AudioChunk], unread: UnreadBudget, bound: OutputBound):
    """The chunks its stream made in the last step, to the job; raises FellBehind when its consumer
    lags, OutputCut once the job has all the audio a request may have (the last chunk cut to fit)."""
    report_text(job)
    for chunk in chunks:
        room = bound.room(job, chunk.pause)
        if len(chunk.audio) >= room:
            if room > 0:
                _deliver(job, chunk.head(room))
            raise OutputCut(bound.message(job))
        _deliver(job, chunk)
    if (why := unread.check(job)) is not None:
        raise FellBehind(why)


def _deliver(job: Job, chunk: AudioChunk):
    if chunk.pause:
        keep_pause(job, len(chunk.audio))
    else:
        job.latents.append(chunk.latents)
    job.deliver(chunk)


def keep_pause(job: Job, samples: int):
    """Where a pause's silence fell among the latents, for the offline render to put it there too;
    the chunks of one pause (and of tags in a row) make one run."""
    at = len(job.latents)
    if job.pauses and job.pauses[-1][0] == at:
        job.pauses[-1][1] += samples
    else:
        job.pauses.append([at, samples])


def report_text(job: Job):
    """The text's progress to the job, and a log line for each runaway segment retried since."""
    report = job.stream.plan.snapshot()
    job.report_text(report)
    for retry in report.retries[job.retries_logged:]:
        log.warning("request %s: segment %d ran away (%d patches without a stop, seed %d); generating it "
                    "again with seed %d", job.id, retry["segment"], retry["patches"], retry["seed"], retry["seed"] + 1)
    job.retries_logged = len(report.retries)


def outcome_line(job: Job, served: int, streams: int) -> str:
    """The log line of a job's end: what was asked, how long it waited and took, how it ended."""
    m = job.timings()
    fmt = lambda v, unit="s": "-" if v is None else f"{v:.3f}{unit}"  # noqa: E731
    report = job.text_report
    retries = 0 if report is None else len(report.retries)
    return (f"request {job.id} #{served} mode={job.mode} text_chars={job.text_chars} queue={fmt(m['queue_s'])} "
            f"streams={streams} ttfp={fmt(m['ttfp_s'])} rtf={fmt(m['rtf'], '')} patches={m['patches']} "
            f"audio={fmt(m['audio_s'])} outcome={job.outcome} segments={len(job.segment_ends)} retries={retries}")


# -- the unread-audio budget ----------------------------------------
FELL_BEHIND = ("Stopped: the connection fell more than {seconds:g} s behind playing the audio it was sent, "
               "so the rest was not made.")
SERVER_FULL = ("Stopped: the server holds as much unread audio as it allows ({seconds:g} s across all "
               "connections) and this connection was not keeping up, so the rest was not made.")
# A consumer this close to the listener's clock keeps up: an event loop's hiccup, a TCP window.
KEEP_UP_S = 0.5


class UnreadBudget:
    def __init__(self, sample_rate: int, per_job_s: float, total_s: float, unread_samples: Callable[[], int]):
        """per_job_s: how far (in the listener's seconds) a job's consumer may fall behind its clock;
        total_s: the model's audio all listed jobs (running and finished) may hold unread together,
        as unread_samples() counts it; asked only when a job is itself behind."""
        self.sample_rate, self.per_job_s, self.total_s = sample_rate, per_job_s, total_s
        self.unread_samples = unread_samples

    def check(self, job) -> str | None:
        """None while `job` may go on; else why it must stop."""
        behind = job.listener.behind()  # the listener's seconds
        if behind > self.per_job_s:
            return FELL_BEHIND.format(seconds=self.per_job_s)
        if behind <= KEEP_UP_S:
            return None
        total = self.unread_samples() / self.sample_rate
        if total <= self.total_s:
            return None
        log.warning("stopping request %s: %.1f s of audio wait unread across all connections, over the "
                    "budget of %g s, and this one is %.1f s behind its listener's clock", job.id, total,
                    self.total_s, behind)
        return SERVER_FULL.format(seconds=self.total_s)


# -- the bound on one request's audio -------------------------------
CUT = ("Cut: this request reached {seconds:g} s of audio (speech and pauses, as its listener hears them), the most one "
       "request may produce here (--max-output-seconds), so the rest of the text was not spoken.")


class OutputBound:
    def __init__(self, sample_rate: int, max_output_s: float):
        self.sample_rate, self.max_output_s = sample_rate, max_output_s

    def room(self, job, pause: bool = False) -> int:
        """The model's samples of a chunk `job` may still deliver: its listener's audio stays within the bound."""
        return job.listener.room(self.max_output_s, pause)

    def message(self, job) -> str:
        return CUT.format(seconds=self.max_output_s)


# -- failures -------------------------------------------------------
INTERNAL_ERROR = "Generation failed because of an internal error on the server; it has been logged."
OUT_OF_MEMORY = ("The server ran out of memory for this request; try a shorter text or reference clip, "
                 "or try again in a moment.")
SHUTTING_DOWN = "The server is shutting down."

# Allocation failures that CUDA libraries report as plain RuntimeErrors (cuBLAS, cuDNN, the driver).
_CUDA_ALLOC_FAILURES = ("CUBLAS_STATUS_ALLOC_FAILED", "CUDNN_STATUS_ALLOC_FAILED", "CUDA error: out of memory")


class FellBehind(Exception):
    """The job's consumer has more unread audio than allowed: it is not reading the stream."""


class OutputCut(Exception):
    """The job has made all the audio one request may have (OutputBound)."""


def is_out_of_memory(exc: BaseException) -> bool:
    if isinstance(exc, (MemoryError, torch.cuda.OutOfMemoryError)):
        return True
    return isinstance(exc, RuntimeError) and any(s in str(exc) for s in _CUDA_ALLOC_FAILURES)


def release_memory():
    """Give back what a failed request held: cycles, and on CUDA the allocator's cached blocks."""
    gc.collect()
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        with CAPTURE_LOCK:  # empty_cache() touches every GPU: not while another one captures a graph
            torch.cuda.empty_cache()


def classify(exc: BaseException) -> tuple[str, str]:
    """(message for the consumer, outcome) of a job that failed with `exc`."""
    if isinstance(exc, InputError):
        return str(exc), "input_error"
    if isinstance(exc, FellBehind):
        return str(exc), "too_slow"
    if is_out_of_memory(exc):
        return OUT_OF_MEMORY, "out_of_memory"
    return INTERNAL_ERROR, "error"


def log_failure(job_id: str, exc: BaseException):
    # The traceback goes to the log as text, then its frames drop their locals: a log handler
    # that keeps records (or the exception itself) must not keep a failed request's tensors.
    log.error("job %s failed:\n%s", job_id, "".join(traceback.format_exception(exc)).rstrip())
    traceback.clear_frames(exc.__traceback__)
