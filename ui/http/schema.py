"""The JSON body of a streaming request, and how it becomes the engine's SynthesisRequest.

A request has two shapes from route to engine: the route's body (this StreamBody, or the OpenAI
route's SpeechBody, ui/http/speech_body.py), whose pydantic model checks JSON types and shape (and,
for SpeechBody, the choices only its route has: model, format, rate), and the SynthesisRequest built
from it here. Unknown fields are refused rather than ignored, so a typo ("cfg": 3) never silently
runs with defaults. What the route checks is about HTTP only: its
field names (which mode reads which field) and resolving an upload id or a saved voice to a clip.
Every value is checked once, by the engine (SynthesisRequest and Engine.prepare), against the one
spec of the modes (inference/request/modes.py), so the page, the routes and the engine share one set
of limits and one wording; an error names the field at fault (InputError.param).
"""
from __future__ import annotations

import difflib
import secrets
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from inference.errors import InputError
from inference.request import modes
from inference.request.request import SynthesisRequest
from inference.text.spoken import has_content


class PageFields(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    mode: Literal[tuple(modes.MODES)] = modes.DEFAULT_MODE
    text: str
    control: str | None = None  # voice description (design) or style instruction (cloning)
    reference_id: str | None = None
    prompt_text: str | None = None  # exact transcript of the clip (ultimate)
    seed: int | None = None
    request_id: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_-]{8,64}$")
    voice: str | None = None  # a saved voice (cloning modes), instead of reference_id; at most max_voice_chars
    normalize: bool = False  # numbers, dates and units read as words (inference/text/normalize.py)
    trim_silence: bool = False  # cut the silence at the clip's ends (inference/request/vad.py)
    timestamps: Literal[modes.TIMESTAMPS] = modes.TIMESTAMPS[0]  # "word": every word timed (ui/services/words.py)


# The page's body: its own fields, and every numeric setting of the spec with its default (checked
# against its range once, by the engine's request).
StreamBody = create_model("StreamBody", __base__=PageFields,
                          **{name: (modes.field_type(name), modes.default(name)) for name in modes.TUNING})


def parse_body(raw, max_voice_chars: int) -> StreamBody:
    """The page's body; max_voice_chars: the settings' longest `voice`."""
    try:
        body = StreamBody.model_validate(raw)
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_input=False)
        loc = next((e for e in errors if e.get("type") == "extra_forbidden"), errors[0]).get("loc", ())
        raise InputError(describe_validation(exc), str(loc[0]) if loc else None) from None
    check_voice_chars(body.voice, max_voice_chars)
    return body


def check_voice_chars(voice: str | None, limit: int):
    """A `voice` is looked up and may be echoed in a refusal: longer than the settings allow, it is
    refused in pydantic's words, as the body's other fields are."""
    if voice is not None and len(voice) > limit:
        raise InputError(f"field 'voice': String should have at most {limit} characters", "voice")


def describe_validation(exc: ValidationError, fields=None) -> str:
    """Pydantic's complaint in one sentence, without echoing the (possibly huge) input. An unknown
    field is named first, with the accepted field it is closest to: a typo ("txt") would otherwise
    be heard only as the required field it left out. `fields`: the body's accepted fields (default
    the page's StreamBody's)."""
    errors = exc.errors(include_url=False, include_input=False)
    err = next((e for e in errors if e.get("type") == "extra_forbidden"), errors[0])
    where = ".".join(str(p) for p in err.get("loc", ())) or "body"
    if len(where) > 40:
        where = where[:40] + "…"
    if err.get("type") == "extra_forbidden":
        accepted = list(fields if fields is not None else StreamBody.model_fields)
        close = difflib.get_close_matches(where, accepted, n=1)
        guess = f" (did you mean {close[0]!r}?)" if close else ""
        return f"unknown field {where!r}{guess}: the accepted fields are {', '.join(accepted)}"
    return f"field {where!r}: {err.get('msg', 'invalid value')}"


def blank(value: str | None) -> bool:
    """Nothing to read: absent, or only spaces, controls, zero-width, combining or direction marks."""
    return value is None or not has_content(value)


def to_request(body: StreamBody, clips, voices=None) -> SynthesisRequest:
    """Map the page's modes onto the engine's request; `clips` resolves upload ids, `voices(name)`
    saved voices as (Voice, ReferenceClip) (ui/library/voice_store.py; None: no library). May read
    the disk (a saved voice's patches): call it off the event loop."""
    control = None if blank(body.control) else body.control.strip()
    seed = body.seed if body.seed is not None else random_seed()
    common = dict(text=body.text, seed=seed, normalize=body.normalize, trim_silence=body.trim_silence,
                  **{name: getattr(body, name) for name in modes.TUNING})
    if body.mode == "design":
        _refuse(body.reference_id, "a reference clip is not used in voice design: pick a cloning mode", "reference_id")
        _refuse(body.voice, "a saved voice is not used in voice design: pick a cloning mode", "voice")
        _refuse(body.prompt_text, "a transcript is only used in ultimate cloning", "prompt_text")
        if body.trim_silence:
            raise InputError("trim_silence trims a reference clip, and voice design has none: leave it out",
                             "trim_silence")
        return SynthesisRequest(control=control, **common)
    clip, saved_transcript = _clone_source(body, clips, voices)
    if body.mode == "cloning":
        _refuse(body.prompt_text, "a transcript is only used in ultimate cloning", "prompt_text")
        return SynthesisRequest(control=control, reference_audio=clip, **common)
    transcript = saved_transcript if blank(body.prompt_text) else body.prompt_text
    if blank(transcript):
        raise InputError("ultimate cloning needs the exact transcript of the reference clip"
                         + (f": the saved voice {body.voice!r} has none, so type it, or use controllable cloning"
                            if not blank(body.voice) else ""), "prompt_text")
    # Control is passed on so that SynthesisRequest refuses it with its own message (it would be read aloud).
    return SynthesisRequest(control=control, reference_audio=clip, prompt_audio=clip,
                            prompt_text=transcript.strip(), **common)


def _clone_source(body: StreamBody, clips, voices):
    """The clip to clone and the transcript saved with it: a saved voice, or an uploaded clip."""
    if not blank(body.voice):
        _refuse(body.reference_id, "give a saved voice or an uploaded clip, not both", "reference_id")
        if voices is None:
            raise InputError("this server keeps no voice library: upload or record a clip instead", "voice")
        voice, clip = voices(body.voice)
        return clip, voice.transcript
    if blank(body.reference_id):
        raise MissingClip()
    return clips.get(body.reference_id).as_engine_input(), None


class MissingClip(InputError):
    """A cloning mode's request without a clip. Its message names the fields this body takes for
    one; an interface whose fields differ says it in its own terms (`sources`): Gradio's API sends
    a file (ui/page/api.py), and the page, which knows its own controls, asks for an upload, a
    recording or a saved voice before it sends anything (static/player/player.js)."""

    def __init__(self, sources: str = "send reference_id (a clip's id from POST /voxcpm/upload) or voice "
                                      "(a saved voice's name, GET /voxcpm/voices)"):
        super().__init__(f"this mode needs a reference clip: {sources}", "reference_id")


def random_seed() -> int:
    """A request's seed when it gives none: drawn here, so the answer can tell it (X-Seed) and the
    page can show it (below PAGE_SEED_LIMIT: JavaScript's numbers hold it)."""
    return secrets.randbelow(modes.PAGE_SEED_LIMIT)


def check_text(name: str, value: str | None, limit: int | None = None, param: str | None = None):
    """Refuses a free-text field that the tokenizer cannot take (lone surrogates), or one longer
    than `limit`: for text that is not a synthesis request's (a saved voice's transcript), which
    the engine checks itself."""
    if value is None:
        return
    if limit is not None and len(value) > limit:
        raise InputError(f"the {name} has {len(value)} characters; the limit is {limit}", param)
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # JSON can carry lone surrogates; the tokenizer cannot
        raise InputError(f"the {name} holds characters that are not valid Unicode (lone surrogates)", param) from None


def _refuse(value: str | None, message: str, param: str):
    if not blank(value):
        raise InputError(message, param)
