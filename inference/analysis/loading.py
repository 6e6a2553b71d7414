"""The analysis models, loaded on first use inside the analysis process (process.py).

Loading is the slow part (a download on first use, then reading the weights), so it runs on a
thread of its own: a job that needs a model waits for it at most `wait_s`, then hears that it is
still being loaded while the load goes on. A model that cannot be loaded fails its jobs with
`ModelUnavailable`, whose message says why and how to fix it, and is tried again only after
`retry_after_s` (a hub that cannot be reached takes half a minute to say so).
"""
from __future__ import annotations

import importlib
import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ..model.checkpoint import looks_like_path

log = logging.getLogger("voxcpm.analysis")
HUB_PROBE_S = 5.0  # how long a load waits for the hub to answer whether it has the model


class ModelUnavailable(Exception):
    """The model is switched off, cannot be loaded, or is still being loaded: the message says why
    and how to fix it. `retry_after_s`: when asking again may help (None when switched off: never)."""

    def __init__(self, message: str, retry_after_s: float | None = None, loading: bool = False,
                 option: str | None = None):
        super().__init__(message)
        self.retry_after_s, self.loading, self.option = retry_after_s, loading, option  # option: which model

    def __reduce__(self):  # crosses the process boundary whole, not as its message alone
        return type(self), (str(self), self.retry_after_s, self.loading, self.option)


@dataclass(frozen=True)
class ModelKind:
    """What a model is for, in the words its refusals use."""
    what: str  # "speech recognition model"
    option: str  # the command-line option that names it
    fix: str  # how to make it available
    off: str  # why there is none when switched off, and how to switch it on


def resolve(dotted: str) -> Callable:
    """`package.module:function` -> the function (the loaders a setting names; tests name stand-ins)."""
    module, _, name = dotted.partition(":")
    return getattr(importlib.import_module(module), name)


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


class Slot:
    """One model of the analysis process (None: switched off), loaded at most once, on first use."""

    def __init__(self, kind: ModelKind, name: str | None, device: str, load: Callable[[str, str], Any],
                 retry_after_s: float, wait_s: float):
        self.kind, self.name, self.device = kind, name, device
        self.retry_after_s, self.wait_s = retry_after_s, wait_s
        self._load = load
        self._lock = threading.Lock()
        self._model: Any = None
        self._loading: threading.Thread | None = None
        self._failure: tuple[float, str] | None = None  # (when, message) of the last failed load

    def get(self) -> Any:
        """The model; ModelUnavailable when it is off, failed recently, or still loads after wait_s."""
        try:
            return self._get()
        except ModelUnavailable as exc:
            exc.option = self.kind.option
            raise

    def _get(self) -> Any:
        if self.name is None:
            raise ModelUnavailable(self.kind.off)
        with self._lock:
            if self._model is not None:
                return self._model
            failure = self._failure
            if failure is not None and time.monotonic() - failure[0] < self.retry_after_s:
                raise ModelUnavailable(failure[1], self.retry_after_s - (time.monotonic() - failure[0]))
            if self._loading is None:
                self._failure = None
                self._loading = threading.Thread(target=self._load_now, name=f"load-{self.kind.option[2:]}", daemon=True)
                self._loading.start()
            loading = self._loading
        loading.join(self.wait_s)
        with self._lock:
            if self._model is not None:
                return self._model
            if self._failure is not None and not loading.is_alive():
                raise ModelUnavailable(self._failure[1], self.retry_after_s)
        raise ModelUnavailable(f"the {self.kind.what} {self.name!r} is still being loaded (a download on first "
                               "use): try again in a minute", min(self.retry_after_s, 30.0), loading=True)

    def _load_now(self):
        began = time.monotonic()
        try:
            model = self._load(self.name, self.device)
        except Exception as exc:  # noqa: BLE001 - any reason: the message and the log say which
            message = load_failure(self.kind.what, self.name, exc, self.kind.fix)
            log.warning("%s", message, exc_info=log.isEnabledFor(logging.DEBUG))
            with self._lock:
                self._failure, self._loading = (time.monotonic(), message), None
            return
        log.info("%s %s loaded on %s in %.1f s", self.kind.what, self.name, self.device, time.monotonic() - began)
        with self._lock:
            self._model, self._loading = model, None


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
