"""Errors with messages meant for the person who made the request."""


class InputError(ValueError):
    """A request the engine refuses: the message names the problem and what is accepted."""


class AudioInputError(InputError):
    """Reference or prompt audio that cannot be used."""


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be found or does not match the model."""
