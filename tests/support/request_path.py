"""Counting a request's way through the app, as it runs: what tests/unit/test_front_door_counts.py
holds the front doors to (issue 56), and what `python -m tests.support.request_path` prints.

- hops: the functions of the product (not the tests, not libraries) that carry the request from
  the route to the engine: each one called with the request in one of its shapes (the JSON body,
  the route's parsed body, the engine's SynthesisRequest, its Prepared, the Job), from the route
  handler's first such call up to the engine's start() taking it; `self` is not an argument here
  (a method of the Job that carries it is the record changing, not a hop), and the route's wait for
  its answer (common.first_audio, ui/http/listen.py) is no step towards the engine.
- threads: how many threads those hops ran on.
- checks: the modules whose hops' own code refuses input (raises InputError, Refusal, ParamError,
  or a pydantic ValidationError through model_validate): the places a request is checked.
- state holders: the objects of the product, made for one stream, whose state changes while its
  audio is made (their fields compared between two reads of the stream): what one stream is held
  by, as nano-vllm's Sequence holds one. One held by a single other such object alone (a job's
  metrics) is part of its owner; one that two of them share (the listener) counts on its own.

Profiling hooks see every thread started after `install()`: install them before the app is built.
"""
from __future__ import annotations

import gc
import inspect
import re
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = tuple(str(ROOT / d) + "/" for d in ("inference", "ui")) + (str(ROOT / "app.py"),)
WAITS = ("ui/http/common:first_audio", "ui/http/listen:", "ui/http/common:next_event")
REFUSES = re.compile(r"raise (InputError|Refusal|ParamError|busy|retry_later|unavailable)\b|model_validate\(")


@dataclass
class RequestPath:
    hops: list[str] = field(default_factory=list)  # module:function, in the order first called
    threads: set[int] = field(default_factory=set)
    checks: list[str] = field(default_factory=list)


class Tracer:
    """A profile hook on every thread: records the hops of the one request whose text is `mark`."""

    def __init__(self):
        self.mark: str | None = None
        self.path = RequestPath()
        self.reached = threading.Event()  # the engine's start() has taken the request
        self._codes: dict = {}
        self._shapes: tuple = ()

    def install(self):
        from inference.request.request import SynthesisRequest
        from inference.runtime.prepare import Prepared
        from inference.serving.job import Job

        self._shapes = (SynthesisRequest, Prepared, Job)
        threading.setprofile(self._hook)
        sys.setprofile(self._hook)

    def uninstall(self):
        self.mark = None  # a thread that outlives this keeps the hook: it then returns at once
        threading.setprofile(None)
        sys.setprofile(None)

    def follow(self, mark: str | None):
        """Records the hops of the request whose text is `mark` (None: records nothing)."""
        self.mark, self.path = mark, RequestPath()
        self.reached.clear()

    def _hook(self, frame, event, arg):
        if event != "call" or self.mark is None or self.reached.is_set():
            return
        code = frame.f_code
        if not code.co_filename.startswith(PRODUCT):
            return
        if not self._carries(frame, code):
            return
        name = f"{Path(code.co_filename).relative_to(ROOT).with_suffix('')}:{code.co_qualname}"
        if name.startswith(WAITS):
            return
        if name not in self.path.hops:
            self.path.hops.append(name)
            module = name.partition(":")[0]
            if REFUSES.search(self._source(code)) and module not in self.path.checks:
                self.path.checks.append(module)
        self.path.threads.add(threading.get_ident())
        if code.co_name == "start" and "runtime/engine" in code.co_filename:
            self.reached.set()

    def _carries(self, frame, code) -> bool:
        names = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
        for name in names:
            if name in ("self", "cls"):
                continue
            value = frame.f_locals.get(name)
            if isinstance(value, self._shapes) and self._ours(value):
                return True
            if isinstance(value, dict) and self.mark in (value.get("text"), value.get("input")):
                return True
            if self.mark in (getattr(value, "text", None), getattr(value, "input", None)):
                return True
        return False

    def _ours(self, value) -> bool:
        request = getattr(value, "request", value)
        text = getattr(request, "text", None)
        return text is None or text == self.mark or getattr(value, "text_chars", -1) == len(self.mark)

    def _source(self, code) -> str:
        if code not in self._codes:
            try:
                self._codes[code] = inspect.getsource(code)
            except OSError:
                self._codes[code] = ""
        return self._codes[code]


def product_objects() -> dict[int, object]:
    """Every object gc tracks whose class is the product's, by id."""
    out = {}
    for obj in gc.get_objects():
        module = getattr(type(obj), "__module__", "")
        if isinstance(module, str) and module.startswith(("inference.", "ui.")) and not isinstance(obj, type):
            out[id(obj)] = obj
    return out


def fingerprint(obj) -> tuple:
    """An object's own fields: values of plain ones, the lengths of containers, identities else."""
    try:
        fields = vars(obj)
    except TypeError:
        return ()
    out = []
    for key, value in sorted(fields.items()):
        if isinstance(value, (int, float, str, bool, type(None))):
            out.append((key, value))
        elif isinstance(value, (list, tuple, dict, set)):
            out.append((key, len(value)))
        else:
            out.append((key, id(value)))
    return tuple(out)


class Holders:
    """The product's objects made since `before()`, fingerprinted at two moments of a stream."""

    def before(self):
        self._old = set(product_objects())

    def first(self):
        self._seen = {i: (o, fingerprint(o)) for i, o in product_objects().items() if i not in self._old}

    def second(self) -> tuple[list[str], list[str]]:
        """The classes of those made between before() and first() whose fields changed since first():
        all of them, and the owners among them (one held by one other of them alone is its part)."""
        now = product_objects()
        changed = [o for i, (o, was) in self._seen.items() if i in now and now[i] is o and fingerprint(o) != was]
        holders_of = {id(vars(o)): o for o in now.values() if hasattr(o, "__dict__")}
        owned = set()
        for o in changed:
            held_by = {id(holders_of[id(r)]) for r in gc.get_referrers(o) if id(r) in holders_of}
            if len(held_by) == 1 and any(id(c) in held_by for c in changed):
                owned.add(id(o))
        name = lambda o: f"{type(o).__module__}.{type(o).__qualname__}"  # noqa: E731
        return sorted({name(o) for o in changed}), sorted({name(o) for o in changed if id(o) not in owned})
