"""What the scheduler knows of how long its work takes, learned from its own steps on its clock.

Two figures: one step's duration (launch a patch of every live stream, collect one), and the
extra time one joining stream's prefill adds to a step. On a GPU a prefill is queued behind the
patch in flight, so the step after the one that admitted it waits for it (`lag` 1); on the CPU
everything runs as it is called (`lag` 0).
"""
from __future__ import annotations

import collections

WEIGHT = 0.2  # of the newest sample in each running average


def _average(old: float | None, sample: float) -> float:
    return sample if old is None else old + WEIGHT * (sample - old)


class StepCosts:
    def __init__(self, lag: int):
        self.step_s: float | None = None  # a step that waited for no prefill
        self.join_s: float | None = None  # one prefill's extra time, per joining stream
        self.recent: collections.deque[int] = collections.deque(maxlen=lag + 1)  # streams admitted, by step

    def record(self, admitted: int, seconds: float):
        """One step that launched a patch: how many streams it admitted, and how long it took."""
        self.recent.append(admitted)
        felt = self.recent[0] if len(self.recent) == self.recent.maxlen else 0  # prefills it waited for
        if felt == 0:
            self.step_s = _average(self.step_s, seconds)
        elif self.step_s is not None:
            self.join_s = _average(self.join_s, max(0.0, seconds - self.step_s) / felt)

    def skip(self):
        """A step that launched nothing (no live stream): it says nothing of the costs."""
        self.recent.append(0)

    def joiners_within(self, seconds: float, waiting: int) -> int:
        """How many of `waiting` joining streams may be prefilled in one step so that the step
        with their prefills still ends within `seconds` (the shortest slack of a playing stream):
        the patch collected after the prefills then comes before that listener's buffer runs dry.
        At least one, so that nobody waits for ever; all while nothing is known yet."""
        if self.step_s is None:
            return waiting
        per_join = self.join_s if self.join_s is not None else self.step_s  # until measured: a step each
        room = seconds - self.step_s
        fits = waiting if per_join <= 0 else int(max(0.0, room) // per_join)
        return max(1, min(waiting, fits))
