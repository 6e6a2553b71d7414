"""Errors with messages meant for the person who made the request."""


class InputError(ValueError):
    """A request the engine refuses: the message names the problem and what is accepted. `param`
    names the request's field at fault when one alone is (the engine's name: `text`, `control`,
    `max_len`...; each route maps it to its own body's field)."""

    def __init__(self, message: str, param: str | None = None):
        super().__init__(message)
        self.param = param


class AudioInputError(InputError):
    """Reference or prompt audio that cannot be used."""


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be found or does not match the model."""


class QueueFullError(RuntimeError):
    """The rows and the waiting line are full (or the worker is closed): the caller should say so
    rather than wait forever (inference/serving/worker.py)."""
