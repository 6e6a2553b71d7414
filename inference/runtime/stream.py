"""One request on the engine (as nano-vllm's Sequence): its row, its counters, its listener
(inference/request/listener.py: whose clock the scheduler's deadlines read), and how it ended. Only
the scheduler changes it (inference/runtime/scheduler.py); other layers read it, and any thread may
cancel it. Its audio is not kept here: each step returns what it produced (Engine.step)."""
from __future__ import annotations

import threading

from ..request.listener import Listener


class Stream:
    def __init__(self, prompt_len: int, min_len: int, cap: int, iterations: int, listener: Listener):
        self.prompt_len, self.min_len, self.cap, self.iterations = prompt_len, min_len, cap, iterations
        self.listener = listener
        self.row = -1  # set when the engine gives it a row
        self.launched = 0  # patches queued on the device
        self.done = False
        self.error: BaseException | None = None
        self.join = None  # the runner's Join until the stream has been admitted
        self.plan = None  # its Continuation: the segments of its text (inference/request/continuation.py)
        self.generation = 0  # counts (re)admissions: a patch launched before one is not this segment's
        self.decode_context = None  # [C, P, D] patches the VAE decoder was warmed on (continuation)
        self._cancel = threading.Event()

    def cancel(self):
        """Any thread may call this; the engine frees the row at its next step."""
        self._cancel.set()

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()

    def restart(self, prompt_len: int, cap: int):
        """The row is re-prefilled for another segment (or another attempt at one)."""
        self.prompt_len, self.cap, self.launched = prompt_len, cap, 0
        self.generation += 1

    def park(self):
        """It waits for text (a live request): a patch launched before is not its next segment's."""
        self.generation += 1

    @property
    def position(self) -> int:
        """Cache position the next launched patch writes at."""
        return self.prompt_len + self.launched

    def wants_patch(self) -> bool:
        return not self.done and self.launched < self.cap

    def stops_after(self, index: int, stop_flag: bool) -> bool:
        """The official rule: the stop head counts after min_len patches (that patch is kept), and
        the length cap ends it regardless."""
        return (index > self.min_len and stop_flag) or index + 1 >= self.cap
