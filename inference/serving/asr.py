"""Automatic transcripts of reference clips (ultimate cloning needs the clip's exact words): a
speech recognition model, Whisper by default, through transformers' `pipeline("automatic-speech-
recognition")`, loaded on first use.

Where it runs: a transcription is a call on an engine's worker thread (`Serving.call`, between two
steps, like every other piece of GPU work), on that engine's device: the GPU it serves, or the CPU
with an engine on the CPU. Loading is the slow part (a download on first use, then reading the
weights), so it never happens there: a call that finds no model on its device answers
`NotLoaded(device)`, and its caller has the model loaded (on a thread of its own) and calls again. Live
streams thus wait only for the transcription itself, once, between two patches; a clip is one
pass of the model (at most MAX_SECONDS), so that wait stays short.

A model that cannot be loaded (offline and not in the cache, a missing folder) fails the
transcriptions with `AsrUnavailable`, whose message says how to fix it, and is tried again only
after RETRY_AFTER_S (a hub that cannot be reached takes half a minute to say so); nothing else in
the app depends on it.
"""
from __future__ import annotations

import concurrent.futures
import logging
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from ..errors import InputError
from ..model.checkpoint import looks_like_path
from ..request.audio_input import resample

log = logging.getLogger("voxcpm.asr")
MAX_SECONDS = 30.0  # one Whisper window: one pass, a bounded wait for the streams
RETRY_AFTER_S = 60.0
HUB_PROBE_S = 5.0  # how long a load waits for the hub to answer whether it has the model
FIX = ("To fix: give a local copy with --asr-model /path/to/folder (a Whisper checkpoint: config.json, "
       "model.safetensors, preprocessor_config.json and the tokenizer's files), let the server reach the "
       "Hugging Face hub once so that it downloads, or switch automatic transcripts off with --asr-model none.")


class AsrUnavailable(Exception):
    """No transcript can be made (switched off, or the model cannot be loaded): the message says why
    and how to fix it. The HTTP layer answers 503."""


@dataclass(frozen=True)
class NotLoaded:
    """What a transcription call answers when the model is not on its engine's device yet."""
    device: str


@dataclass(frozen=True)
class Loaded:
    pipe: Any  # a transformers AutomaticSpeechRecognitionPipeline, or anything called the same way
    rate: int  # the sample rate its feature extractor takes


def load_pipeline(name: str, device: torch.device):
    """transformers' speech recognition pipeline for a hub id or a local folder, on `device`: half
    precision on a GPU (as Whisper is published), float32 on the CPU."""
    import transformers

    if looks_like_path(name) or Path(name).expanduser().exists():
        folder = Path(name).expanduser()
        if not folder.is_dir():
            raise FileNotFoundError(f"the folder {folder} does not exist")
        name = str(folder)
    else:
        check_hub(name)
    dtype = torch.float16 if device.type == "cuda" else torch.float32
    # Called dtype since transformers 4.56; torch_dtype before (requirements.txt allows 4.40 on).
    major, minor = (int(part) for part in re.findall(r"\d+", transformers.__version__)[:2])
    key = "dtype" if (major, minor) >= (4, 56) else "torch_dtype"
    return transformers.pipeline("automatic-speech-recognition", model=name, device=device, **{key: dtype})


def check_hub(name: str):
    """A hub id that is not in the local cache needs the hub: asked once, briefly, so that a server
    that cannot reach it says so at once (transformers retries for about half a minute first)."""
    from huggingface_hub import constants, model_info, try_to_load_from_cache
    from huggingface_hub.utils import HfHubHTTPError, LocalEntryNotFoundError

    if constants.HF_HUB_OFFLINE or isinstance(try_to_load_from_cache(name, "config.json"), str):
        return
    try:
        model_info(name, timeout=HUB_PROBE_S)
    except HfHubHTTPError:
        raise  # the hub answered (no such model, gated...): its own reason
    except Exception as exc:  # noqa: BLE001 - no answer at all: a name lookup, a connection, a timeout
        raise LocalEntryNotFoundError(f"it is not in the Hugging Face cache and the hub did not answer ({exc})") from None


def check_length(seconds: float):
    if seconds > MAX_SECONDS:
        raise InputError(f"the clip lasts {seconds:.1f} s; automatic transcripts take clips of up to "
                         f"{MAX_SECONDS:g} s (one pass of the speech recognition model): trim it, or type "
                         "its transcript")


class Transcriber:
    """One model name (None: switched off), loaded at most once per device, from any thread."""

    def __init__(self, model: str | None, load: Callable[[str, torch.device], Any] = load_pipeline,
                 retry_after_s: float = RETRY_AFTER_S):
        self.model = model
        self.retry_after_s = retry_after_s
        self._load = load
        self._loaded: dict[str, Loaded] = {}  # device -> model; read by worker threads without the lock
        self._loads: dict[str, concurrent.futures.Future] = {}  # device -> its load, under way or ended
        self._lock = threading.Lock()
        self._failure: tuple[float, str] | None = None  # (when, message) of the last failed load
        if model is not None and looks_like_path(model) and not Path(model).expanduser().is_dir():
            log.warning("--asr-model %s: there is no such folder; automatic transcripts will be refused", model)

    def check_available(self):
        """Raises AsrUnavailable when switched off, or when the last load failed recently."""
        if self.model is None:
            raise AsrUnavailable("automatic transcripts are switched off on this server (--asr-model none): "
                                 "type the clip's transcript, or start the server with --asr-model set to a "
                                 "Whisper checkpoint (a hub id or a local folder)")
        failure = self._failure
        if failure is not None and time.monotonic() - failure[0] < self.retry_after_s:
            raise AsrUnavailable(failure[1])

    def loading(self, device: str) -> concurrent.futures.Future:
        """The load of the model on `device`: started now on a thread of its own, unless one is under
        way or has succeeded; callers that arrive meanwhile share it. Its future ends with None, or
        AsrUnavailable. Nobody's thread waits for it (it may download gigabytes for minutes)."""
        with self._lock:
            future = self._loads.get(device)
            if future is not None and not (future.done() and future.exception() is not None):
                return future
            self.check_available()
            future = self._loads[device] = concurrent.futures.Future()
        threading.Thread(target=self._load_into, args=(device, future), name=f"asr-load-{device}", daemon=True).start()
        return future

    def load(self, device: str):
        """loading(device), waited for on this thread."""
        self.loading(device).result()

    def _load_into(self, device: str, future: concurrent.futures.Future):
        began = time.monotonic()
        try:
            pipe = self._load(self.model, torch.device(device))
            loaded = Loaded(pipe, int(pipe.feature_extractor.sampling_rate))
        except Exception as exc:  # noqa: BLE001 - any reason: the message and the log say which
            message = load_failure(self.model, exc)
            self._failure = (time.monotonic(), message)
            log.warning("%s", message, exc_info=log.isEnabledFor(logging.DEBUG))
            future.set_exception(AsrUnavailable(message))
            return
        self._loaded[device], self._failure = loaded, None
        log.info("speech recognition model %s loaded on %s in %.1f s", self.model, device, time.monotonic() - began)
        future.set_result(None)

    def on_engine(self, rate: int, audio: np.ndarray) -> Callable[[Any], str | NotLoaded]:
        """fn(engine) for Serving.call: the clip's transcript, made on the engine's device by the
        model loaded there, or NotLoaded(device) when there is none yet."""
        def transcribe(engine) -> str | NotLoaded:
            device = str(engine.device)
            loaded = self._loaded.get(device)
            if loaded is None:
                return NotLoaded(device)
            samples = resample(audio, rate, loaded.rate)
            return loaded.pipe({"raw": samples, "sampling_rate": loaded.rate})["text"].strip()
        return transcribe


def load_failure(name: str, exc: BaseException) -> str:
    """Why `name` did not load, in a sentence, then the fix."""
    from huggingface_hub import constants
    from huggingface_hub.utils import LocalEntryNotFoundError

    cause = exc.__cause__ or exc
    if isinstance(exc, FileNotFoundError):
        why = str(exc)
    elif isinstance(cause, LocalEntryNotFoundError):
        offline = "HF_HUB_OFFLINE is set" if constants.HF_HUB_OFFLINE else "the hub cannot be reached"
        why = f"it is not in the Hugging Face cache and {offline}"
    else:
        lines = str(exc).strip().splitlines()
        why = f"{type(exc).__name__}: {lines[0][:300] if lines else 'no reason given'}"
    return f"the speech recognition model {name!r} could not be loaded: {why}.\n{FIX}"
