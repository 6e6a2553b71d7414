"""The serving layer's seams, as Protocols.

`BatchEngine` and `EngineStream`: what a worker needs of an engine and of the streams it starts
(inference/runtime/engine.Engine and stream.Stream have this shape). `Serving`: what the HTTP
layer uses of a worker or of a pool of them (EngineWorker, WorkerPool). `ServiceEngine`: what the
services besides streams (services.py: offline render, voice encoding) need of an engine. Tests' stand-ins
implement these whole (tests/fixtures/), so product code reads every member plainly instead of
guessing with getattr(x, name, default)."""
from __future__ import annotations

import concurrent.futures
import threading
from typing import Any, Callable, Protocol, TypeVar, runtime_checkable

import numpy as np
import torch

from ..request.continuation import Report
from ..request.listener import Listener
from ..request.request import AudioChunk, SynthesisRequest
from .job import Job

T = TypeVar("T")


class TextPlan(Protocol):
    """A stream's text as segments (inference/request/continuation.Continuation)."""

    def snapshot(self) -> Report:
        """The progress so far; called for every patch the stream delivers."""


@runtime_checkable
class EngineStream(Protocol):
    """One request on an engine, as its worker reads it after each step (read-only to it: its
    audio comes in what step() returns)."""

    @property
    def done(self) -> bool: ...

    @property
    def error(self) -> BaseException | None:
        """Why it ended, if it failed."""

    @property
    def plan(self) -> TextPlan:
        """Its text's segments; set by the engine's start()."""

    @property
    def decode_context(self) -> torch.Tensor | None:
        """[C, P, D] patches its decoder was warmed on (a continuation), or None."""


S = TypeVar("S", bound=EngineStream)


@runtime_checkable
class BatchEngine(Protocol[S]):
    """Generates up to `rows` streams at once, one patch of each per step(); not thread-safe:
    one worker thread calls it, but for prepare(). S: its own kind of stream, the only kind its stop() takes."""

    @property
    def device(self) -> torch.device: ...

    @property
    def rows(self) -> int:
        """Streams it can run at once."""

    @property
    def free_rows(self) -> int: ...

    @property
    def sample_rate(self) -> int: ...

    @property
    def patch_samples(self) -> int:
        """The samples of audio one patch makes."""

    @property
    def clip_rate(self) -> int:
        """The rate it encodes reference clips at: clips are kept at it, resampled once."""

    @property
    def max_text_chars(self) -> int:
        """The limits it checks requests against, which the HTTP layer also shows and applies."""

    @property
    def max_audio_seconds(self) -> float: ...

    @property
    def encoder_identity(self) -> str:
        """What its encoded reference patches depend on (a clip's memo from another is not used)."""

    def warmup(self) -> float:
        """Captures, compiles and runs short requests so no request pays for it; seconds taken."""

    def prepare(self, req: SynthesisRequest, normalizer: Callable[[list[str], str], list[str]] = ...) -> Any:
        """Checks the request (raising InputError) and does all its host work (text, tokens, clips'
        samples); thread-safe: callers run it on their own thread, never the worker's. normalizer:
        what normalizes its text when it asks (text.normalize.Normalizer: in processes of its own)."""

    def encode_ahead(self, prepared: list[Any]) -> None:
        """The clips of the prepared requests about to start() in one step, encoded together; never
        raises (a bad clip fails its own start())."""

    def start(self, prepared: Any, listener: Listener) -> S:
        """Gives a prepared request (what prepare() returned) a row; it joins at the next step.
        Only GPU work is left for it (encoding clips, the prefill). listener: who hears it (its
        clock is the deadline the engine's admission keeps)."""

    def step(self) -> list[tuple[S, list[AudioChunk]]]:
        """One patch of every live stream; failures land on the streams they concern. Returns what
        it produced: each stream that made chunks or ended in it, with its chunks, oldest first."""

    def stop(self, stream: S) -> None:
        """Ends a stream now and frees its row."""

    def slack(self) -> float | None:
        """The least audio, in seconds, that a playing stream's listener still holds ahead (how long
        work besides the streams may take before one runs dry); None while none plays."""

    @property
    def working(self) -> bool:
        """Whether step() would do anything: False while every stream it holds waits for text."""


class ServiceEngine(Protocol):
    """What the services besides streams (serving/services.py) call on an engine, on its own
    thread through Serving.call."""

    def encode_audio(self, source: Any, side: str, label: str = "audio", trim: bool = False) -> torch.Tensor:
        """A clip (or a ReferenceClip, which keeps what it is given) -> latent patches [n, P, D]."""

    def decode_next(self, render: Any) -> list[tuple[np.ndarray, bool]]:
        """The next piece of an offline decode (runtime/offline.OfflineDecode), as (float32 audio,
        is a pause's silence) parts."""


@runtime_checkable
class Serving(Protocol):
    """What the HTTP layer uses of the worker of one GPU or the pool of several."""

    ready: threading.Event  # set once warm-up has ended (well or not)

    @property
    def sample_rate(self) -> int: ...

    @property
    def patch_samples(self) -> int: ...

    @property
    def max_queue(self) -> int:
        """Requests allowed to wait once every row is taken."""

    @property
    def warmup_error(self) -> BaseException | None:
        """Why no GPU can serve after warm-up; the app then stops."""

    @property
    def busy(self) -> bool: ...

    @property
    def running(self) -> int: ...

    @property
    def waiting(self) -> int: ...

    def submit(self, request: SynthesisRequest | Callable[[], SynthesisRequest], job_id: str | None = None) -> Job:
        """Admits a request at once (QueueFullError when every row and the waiting line are taken) and
        prepares it on serving's intake threads (a function given is called there to build it); its
        job is listed from then on: preparing, queued, running, then its end, or refused."""

    def get(self, job_id: str) -> Job | None: ...

    def call(self, fn: Callable[[Any], T], kind: str = "call") -> concurrent.futures.Future[T]:
        """fn(engine) on the thread that owns an engine, between two steps, when its listeners have
        room for it; kind: what it is, for its learned cost."""

    def gpus(self) -> list[dict]:
        """Each GPU's device, rows, rows_in_use, waiting, alive and failing, for /health."""

    def close(self, timeout: float | None = 10.0) -> None: ...
