"""The analysis models, loaded on first use inside the analysis process (process.py).

A model is in one of three states that a job can be told about, each in its own words (issue 59):
switched off (how to switch it on), cannot be loaded (the loader's own reason: not in the cache
while the hub cannot be reached, files missing from a folder, a checkpoint of the wrong kind; and
what to pass instead), or being loaded (from a folder or the cache, or downloaded, with how far it
has got). Loading runs on a thread of its own: the job that starts it waits for it at most `wait_s`
(a small model is then simply there), every other job is answered at once. A model that failed is
answered with its reason at once on every later job; after `retry_after_s` it is tried again in the
background, and the jobs meanwhile keep hearing the last reason until the new try is really
loading (downloading or reading), so a hub that is still out of reach never makes anyone wait.
"""
from __future__ import annotations

import importlib
import logging
import math
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ..model.checkpoint import looks_like_path

log = logging.getLogger("voxcpm.analysis")
HUB_PROBE_S = 5.0  # how long a load waits for the hub to answer whether it has the model
STATES = ("off", "failed", "loading")
READING_RETRY_S = 3  # a load that reads a folder or the cache: ask again this soon
DOWNLOAD_RETRY_S = (2, 60)  # a download's Retry-After: its estimated end, within these bounds


class ModelUnavailable(Exception):
    """The model is switched off, cannot be loaded, or is being loaded (`state`, one of STATES): the
    message says which, why and what to do. `retry_after_s`: when asking again may help (None: it
    will not, until the server is started otherwise)."""

    def __init__(self, message: str, retry_after_s: float | None = None, state: str = "failed",
                 option: str | None = None):
        super().__init__(message)
        if state not in STATES:
            raise ValueError(f"a model's state is one of {STATES}, not {state!r}")
        self.retry_after_s, self.state, self.option = retry_after_s, state, option  # option: which model

    @property
    def loading(self) -> bool:
        return self.state == "loading"

    def __reduce__(self):  # crosses the process boundary whole, not as its message alone
        return type(self), (str(self), self.retry_after_s, self.state, self.option)


class Unusable(Exception):
    """What a loader found wrong with a checkpoint before trying it (files missing, the wrong kind):
    its message is said as it is."""


@dataclass(frozen=True)
class ModelKind:
    """What a model is for, in the words its refusals use."""
    what: str  # "speech recognition model"
    option: str  # the command-line option that names it
    fix: str  # how to make it available
    off: str  # why there is none when switched off, and how to switch it on


class Progress:
    """What one load is doing, as its loader says with report() from the load's thread: `phase` is
    "starting", "checking" (asking the hub), "downloading" (into `folder`, the model's folder in the
    Hugging Face cache, `total_bytes` when the hub gave the files' sizes) or "reading"."""

    def __init__(self):
        self.phase, self.folder, self.total_bytes = "starting", None, None
        self.began = self.phase_began = time.monotonic()
        self.first_bytes: int | None = None  # bytes in the folder when the download began

    def update(self, phase: str, folder=None, total_bytes: int | None = None):
        self.phase, self.phase_began = phase, time.monotonic()
        self.folder = Path(folder) if folder is not None else None
        self.total_bytes = total_bytes
        self.first_bytes = folder_bytes(self.folder) if self.folder is not None else None

    @property
    def under_way(self) -> bool:
        """Past asking whether it can be loaded at all: bytes are being fetched or read."""
        return self.phase in ("downloading", "reading")


_load_thread = threading.local()


def report(phase: str, folder=None, total_bytes: int | None = None):
    """A loader says what its load is doing now (a no-op where no Slot runs it)."""
    progress = getattr(_load_thread, "progress", None)
    if progress is not None:
        progress.update(phase, folder, total_bytes)


def folder_bytes(folder: Path | None) -> int:
    """Bytes under the folder's blobs/ (a hub model's files, those still downloading included)."""
    blobs = None if folder is None else folder / "blobs"
    if blobs is None or not blobs.is_dir():
        return 0
    total = 0
    for entry in blobs.iterdir():
        try:
            total += entry.stat().st_size
        except OSError:  # renamed from .incomplete as it finished: counted under its new name next time
            pass
    return total


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
        report("reading")
        return str(folder)
    check_hub(name)
    return name


def check_hub(name: str):
    """A hub id that is not in the local cache needs the hub: asked once, within HUB_PROBE_S
    whatever the network does (a request's own timeout does not cover a name lookup that hangs,
    and transformers retries for about half a minute), so that a server that cannot reach it says
    so at once. Reports the load's phase: reading from the cache, or downloading (with the size
    of the files the hub lists)."""
    import huggingface_hub
    from huggingface_hub import constants, try_to_load_from_cache
    from huggingface_hub.utils import HfHubHTTPError, LocalEntryNotFoundError

    if constants.HF_HUB_OFFLINE or isinstance(try_to_load_from_cache(name, "config.json"), str):
        report("reading")
        return
    report("checking")
    answer: dict = {}

    def ask():
        try:
            answer["info"] = huggingface_hub.model_info(name, timeout=HUB_PROBE_S, files_metadata=True)
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
            answer["error"] = exc
    asking = threading.Thread(target=ask, name="hub-probe", daemon=True)
    asking.start()
    asking.join(HUB_PROBE_S)
    if asking.is_alive():
        raise LocalEntryNotFoundError(f"it is not in the Hugging Face cache and the hub did not answer within "
                                      f"{HUB_PROBE_S:g} s")
    error = answer.get("error")
    if isinstance(error, HfHubHTTPError):
        raise error  # the hub answered (no such model, gated...): its own reason
    if error is not None:  # no answer at all: a name lookup, a connection, a timeout
        raise LocalEntryNotFoundError(f"it is not in the Hugging Face cache and the hub did not answer ({error})")
    folder = Path(constants.HF_HUB_CACHE) / ("models--" + name.replace("/", "--"))
    report("downloading", folder=folder, total_bytes=download_size(answer.get("info")))


def download_size(info) -> int | None:
    """About what transformers fetches of a hub model: its weights in one format (safetensors where
    there are any) and its small files; None when the hub gave no sizes."""
    files = [(s.rfilename, s.size) for s in (getattr(info, "siblings", None) or [])]
    if not files or any(size is None for _, size in files):
        return None
    weights = [f for f in files if f[0].endswith(".safetensors")] or [f for f in files if f[0].endswith(".bin")]
    small = [f for f in files if f[0].endswith((".json", ".txt", ".model"))]
    return sum(size for _, size in weights + small) or None


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
        self._progress: Progress | None = None  # of the load under way
        self._failure: tuple[float, str] | None = None  # (when, message) of the last failed load

    def get(self) -> Any:
        """The model; ModelUnavailable when it is off, failed (at once), or is still loading after
        the wait of the job that started the load (at once for every other job)."""
        try:
            return self._get()
        except ModelUnavailable as exc:
            exc.option = self.kind.option
            raise

    def _get(self) -> Any:
        if self.name is None:
            raise ModelUnavailable(self.kind.off, state="off")
        with self._lock:
            if self._model is not None:
                return self._model
            started = self._loading is None and (self._failure is None or self._retry_in() <= 0)
            if started:
                self._start()
            if self._failure is not None and not self._progress_under_way():
                raise self._failed()
            loading = self._loading
        if started and self._failure is None:  # the first load: a small model is there within the wait
            loading.join(self.wait_s)
        with self._lock:
            if self._model is not None:
                return self._model
            if self._loading is None and self._failure is not None:
                raise self._failed()
            progress = self._progress
        raise self._being_loaded(progress)

    def _retry_in(self) -> float:
        return self.retry_after_s - (time.monotonic() - self._failure[0])

    def _progress_under_way(self) -> bool:
        return self._loading is not None and self._progress is not None and self._progress.under_way

    def _failed(self) -> ModelUnavailable:
        retry = self._retry_in()
        # A try under way (in the background) is answered when it ends; else when the next may start.
        return ModelUnavailable(self._failure[1], max(retry, 1.0), state="failed")

    def _start(self):
        """A load on its thread (the lock held)."""
        self._progress = Progress()
        self._loading = threading.Thread(target=self._load_now, args=(self._progress,),
                                         name=f"load-{self.kind.option[2:]}", daemon=True)
        self._loading.start()

    def _being_loaded(self, progress: Progress) -> ModelUnavailable:
        what = f"the {self.kind.what} {self.name!r}"
        now = time.monotonic()
        so_far = f"{now - progress.began:.0f} s so far"
        retry = READING_RETRY_S
        if progress.phase == "downloading":
            done = folder_bytes(progress.folder)
            total = progress.total_bytes
            fetched = done - (progress.first_bytes or 0)
            rate = fetched / max(now - progress.phase_began, 1e-3)
            if total:
                how_far = f"{done / 1e6:.0f} of {total / 1e6:.0f} MB ({min(done / total, 1):.0%})"
                left = (total - done) / rate if rate > 0 else DOWNLOAD_RETRY_S[1]
                retry = min(max(math.ceil(left), DOWNLOAD_RETRY_S[0]), DOWNLOAD_RETRY_S[1])
            else:
                how_far, retry = f"{done / 1e6:.0f} MB so far", 10
            message = f"{what} is being downloaded from the Hugging Face hub: {how_far}, {so_far}"
        elif progress.phase == "reading":
            source = "its folder" if looks_like_path(self.name) or Path(self.name).expanduser().exists() \
                else "the Hugging Face cache"
            message = f"{what} is being loaded from {source} ({so_far})"
        elif progress.phase == "checking":
            message = f"{what} is being looked up on the Hugging Face hub ({so_far})"
        else:
            message = f"{what} is being loaded ({so_far})"
        return ModelUnavailable(f"{message}: try again in {retry} s", retry, state="loading")

    def _load_now(self, progress: Progress):
        began = time.monotonic()
        _load_thread.progress = progress
        try:
            model = self._load(self.name, self.device)
        except BaseException as exc:  # noqa: BLE001 - any reason, even an exit: the message and the log say which
            message = load_failure(self.kind.what, self.name, exc, self.kind.fix)
            log.warning("%s", message, exc_info=log.isEnabledFor(logging.DEBUG))
            with self._lock:
                self._failure, self._loading = (time.monotonic(), message), None
            return
        log.info("%s %s loaded on %s in %.1f s", self.kind.what, self.name, self.device, time.monotonic() - began)
        with self._lock:
            self._model, self._loading, self._failure = model, None, None


def load_failure(what: str, name: str, exc: BaseException, fix: str) -> str:
    """Why `name` did not load, in a sentence, then the fix."""
    from huggingface_hub import constants
    from huggingface_hub.utils import LocalEntryNotFoundError

    cause = exc.__cause__ or exc
    if isinstance(exc, (FileNotFoundError, Unusable)):
        why = str(exc)
    elif isinstance(cause, LocalEntryNotFoundError):
        offline = "HF_HUB_OFFLINE is set" if constants.HF_HUB_OFFLINE else "the hub cannot be reached"
        why = f"it is not in the Hugging Face cache and {offline}"
    else:
        lines = str(exc).strip().splitlines()
        why = f"{type(exc).__name__}: {lines[0][:300] if lines else 'no reason given'}"
    return f"the {what} {name!r} could not be loaded: {why}.\n{fix}"
