"""A model the app loads on first use (speech recognition, speaker verification): at most once per
device, from any thread, never on an engine's worker thread.

Loading is the slow part (a download on first use, then reading the weights), so it runs on a
thread of its own: a call on the worker that finds no model on its device answers
`NotLoaded(device)`, and its caller has the model loaded (`loading`, awaited off the event loop)
and calls again. A model that cannot be loaded fails its users with `ModelUnavailable`, whose
message says why and how to fix it, and is tried again only after RETRY_AFTER_S (a hub that cannot
be reached takes half a minute to say so).
"""
from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch

from ..model.checkpoint import looks_like_path

log = logging.getLogger("voxcpm.models")
RETRY_AFTER_S = 60.0
HUB_PROBE_S = 5.0  # how long a load waits for the hub to answer whether it has the model


class ModelUnavailable(Exception):
    """The model is switched off or cannot be loaded: the message says why and how to fix it.
    `retry_after_s`: when a failed load will be tried again (None when switched off: never)."""

    def __init__(self, message: str, retry_after_s: float | None = None):
        super().__init__(message)
        self.retry_after_s = retry_after_s


@dataclass(frozen=True)
class NotLoaded:
    """What a call on an engine's thread answers when the model is not on its engine's device yet."""
    device: str


def local_folder(name: str) -> str:
    """`name` as given (a hub id, checked with check_hub), or the absolute folder it names
    (FileNotFoundError when there is none)."""
    if looks_like_path(name) or Path(name).expanduser().exists():
        folder = Path(name).expanduser()
        if not folder.is_dir():
            raise FileNotFoundError(f"the folder {folder} does not exist")
        return str(folder)
    check_hub(name)
    return name


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


class OnDemand:
    """One model name (None: switched off), loaded at most once per device, from any thread.
    Subclasses say what the model is (`what`, `option`, `fix`) and wrap what `load` returns."""
    what = "model"
    option = "--model"
    fix = ""
    error = ModelUnavailable

    def __init__(self, model: str | None, load: Callable[[str, torch.device], Any] | None = None,
                 retry_after_s: float = RETRY_AFTER_S):
        self.model = model
        self.retry_after_s = retry_after_s
        self._load = load or self.load_model
        self._loaded: dict[str, Any] = {}  # device -> model; read by worker threads without the lock
        self._loads: dict[str, concurrent.futures.Future] = {}  # device -> its load, under way or ended
        self._lock = threading.Lock()
        self._failure: tuple[float, str] | None = None  # (when, message) of the last failed load
        if model is not None and looks_like_path(model) and not Path(model).expanduser().is_dir():
            log.warning("%s %s: there is no such folder; the %s will not be available", self.option, model, self.what)

    @staticmethod
    def load_model(name: str, device: torch.device) -> Any:
        """The model from a hub id or a folder, on `device` (each subclass names its own loader)."""
        raise NotImplementedError

    def switched_off(self) -> str:
        return f"the {self.what} is switched off on this server ({self.option} none)"

    def check_available(self):
        """Raises `error` when switched off, or when the last load failed recently."""
        if self.model is None:
            raise self.error(self.switched_off())
        failure = self._failure
        if failure is not None and time.monotonic() - failure[0] < self.retry_after_s:
            raise self.error(failure[1], self.retry_after_s - (time.monotonic() - failure[0]))

    def loaded(self, device: str):
        """The model on `device`, or None (read on an engine's thread: no lock, no waiting)."""
        return self._loaded.get(device)

    def loading(self, device: str) -> concurrent.futures.Future:
        """The load of the model on `device`: started now on a thread of its own, unless one is under
        way or has succeeded; callers that arrive meanwhile share it. Its future ends with None, or
        `error`. Nobody's thread waits for it (it may download gigabytes for minutes)."""
        with self._lock:
            future = self._loads.get(device)
            if future is not None and not (future.done() and future.exception() is not None):
                return future
            self.check_available()
            future = self._loads[device] = concurrent.futures.Future()
        threading.Thread(target=self._load_into, args=(device, future), name=f"{self.option[2:]}-load-{device}",
                         daemon=True).start()
        return future

    def load(self, device: str):
        """loading(device), waited for on this thread."""
        self.loading(device).result()

    def wrap(self, raw: Any) -> Any:
        """What `load` returned, as the calls on the engine's thread use it."""
        return raw

    def _load_into(self, device: str, future: concurrent.futures.Future):
        began = time.monotonic()
        try:
            loaded = self.wrap(self._load(self.model, torch.device(device)))
        except Exception as exc:  # noqa: BLE001 - any reason: the message and the log say which
            message = load_failure(self.what, self.model, exc, self.fix)
            self._failure = (time.monotonic(), message)
            log.warning("%s", message, exc_info=log.isEnabledFor(logging.DEBUG))
            future.set_exception(self.error(message, self.retry_after_s))
            return
        self._loaded[device], self._failure = loaded, None
        log.info("%s %s loaded on %s in %.1f s", self.what, self.model, device, time.monotonic() - began)
        future.set_result(None)


def load_failure(what: str, name: str, exc: BaseException, fix: str) -> str:
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
    return f"the {what} {name!r} could not be loaded: {why}.\n{fix}"
