"""What a job's failure is told as, and what the server does about it.

One request's failure must not take the worker down, and its consumer must not see the server's
internals: input errors keep their own message (it says what to change), a consumer that fell
behind is told so, and anything else becomes a generic message while the traceback goes to the
log. An out-of-memory failure also gives back what the failed request held."""
from __future__ import annotations

import gc
import logging
import traceback

import torch

from ..errors import InputError
from ..runtime.cuda_graphs import CAPTURE_LOCK

log = logging.getLogger("voxcpm.worker")

INTERNAL_ERROR = "Generation failed because of an internal error on the server; it has been logged."
OUT_OF_MEMORY = ("The server ran out of memory for this request; try a shorter text or reference clip, "
                 "or try again in a moment.")
SHUTTING_DOWN = "The server is shutting down."

# Allocation failures that CUDA libraries report as plain RuntimeErrors (cuBLAS, cuDNN, the driver).
_CUDA_ALLOC_FAILURES = ("CUBLAS_STATUS_ALLOC_FAILED", "CUDNN_STATUS_ALLOC_FAILED", "CUDA error: out of memory")


class FellBehind(Exception):
    """The job's consumer has more unread audio than allowed: it is not reading the stream."""


class QueueFullError(RuntimeError):
    """The rows and the waiting line are full (or the worker is closed): the caller should say so
    rather than wait forever."""


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
