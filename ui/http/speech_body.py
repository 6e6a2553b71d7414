"""The body of POST /v1/audio/speech (OpenAI's, with our extensions) and the engine's
SynthesisRequest it becomes (to_request): the route resolves `voice` and checks what only it has;
every value the engine takes is checked by the engine, once, against the one spec
(inference/request/modes.py).

Every refusal names the OpenAI parameter to change (InputError.param, sent as OpenAI's `param`)
in the route's own terms (openai_param: the engine's `text` is `input` here), and the settings
it does not take (min_len) never appear in its messages.
"""
from __future__ import annotations

import dataclasses
import re
from typing import ClassVar

from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from inference.errors import InputError
from inference.request import modes
from inference.request.request import SynthesisRequest

from .builtin_voices import BUILTIN_VOICES, builtin_voice
from .common import Asked, text_length
from .schema import blank, random_seed
from ..library.voice_names import RESERVED
from ..library.voice_store import VoiceError
from ..settings import DEFAULTS
from ..services.audio import FORMATS, NOT_OFFERED, PCM_RATE, SAMPLE_RATES, missing_formats, rates_for

MODEL_ID = "voxcpm2"
# OpenAI's speech models are names for the one model here, so a client written for OpenAI only
# changes its base URL. Compared without regard to case.
OPENAI_MODELS = ("tts-1", "tts-1-hd", "gpt-4o-mini-tts")
MODEL_NAMES = (MODEL_ID, "openbmb/voxcpm2") + OPENAI_MODELS
DESIGN = RESERVED[0]
# The page's and the engine's fields under the names this route gives them: a refusal's `param`
# (InputError.param) is told in this route's terms, or as null when it names no field of this body.
OPENAI_NAMES = {"text": "input", "control": "instructions", "reference_id": "voice", "prompt_text": "voice",
                "reference_audio": "voice", "prompt_audio": "voice"}
# The route takes no min_len, so each request keeps its default: max_len may not go below it, and
# the refusal says so in this route's terms (the engine's would name min_len, which it has not).
_MAX_LEN = modes.SETTINGS["max_len"]
MAX_LEN = dataclasses.replace(_MAX_LEN, low=max(_MAX_LEN.low, modes.default("min_len")))
MAX_VOICE_CHARS = DEFAULTS.http.max_voice_chars  # as the page's body (StreamBody.voice)


class ParamError(InputError):
    """A request refused for one parameter of this route, which OpenAI's error names in `param`."""

    def __init__(self, param: str, message: str):
        super().__init__(message, param)


def openai_param(param: str | None) -> str | None:
    """An input error's field (the page's or the engine's name) as this route's parameter."""
    named = OPENAI_NAMES.get(param, param)
    return named if named in SpeechBody.model_fields else None


_ENGINE_TEXT = re.compile(r"^(the )?text\b")


def openai_message(exc: InputError) -> str:
    """An input error's message in this route's terms: the engine's checks call the words to speak
    `text` ("text is empty", "the text holds only pause tags"), which this body calls `input`."""
    message = str(exc)
    return _ENGINE_TEXT.sub(r"\1input", message) if exc.param == "text" else message


class VoiceId(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    id: str


class OpenAIFields(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    request_id: ClassVar[None] = None  # OpenAI's body names no request id: the server picks one
    model: str
    input: str
    voice: str | VoiceId | None = None
    instructions: str | None = None
    response_format: str = "mp3"
    stream_format: str = "audio"
    # Our extensions, documented in docs/api.md (the page's advanced settings).
    seed: int | None = None
    normalize: bool = False
    trim_silence: bool = False
    sample_rate: int | None = None  # None: 24 kHz for pcm (OpenAI's), the model's for the other formats
    timestamps: str = modes.TIMESTAMPS[0]  # "word": each segment's words timed, as events (sse only)


# The spec's numeric settings this route takes (OpenAI's pace field among them; min_len not), each
# None (or absent) for its default: checked against its range once, by the engine's request.
TUNING = tuple(name for name in modes.TUNING if name != "min_len")
SpeechBody = create_model("SpeechBody", __base__=OpenAIFields,
                          **{name: (modes.field_type(name) | None, None) for name in TUNING})


def parse_speech(raw) -> SpeechBody:
    """The OpenAI body, its JSON types and shape checked, and the choices only this route has
    (model, response_format, stream_format, sample_rate, the lowest max_len)."""
    try:
        speech = SpeechBody.model_validate(raw)
    except ValidationError as exc:
        raise _described(exc) from None
    if speech.model.lower() not in MODEL_NAMES:
        raise ParamError("model", f"model {speech.model[:80]!r} is not served here: use one of "
                                  f"{', '.join((MODEL_ID,) + OPENAI_MODELS)} (GET /v1/models)")
    _choice("response_format", speech.response_format, [f for f in FORMATS if f not in missing_formats()],
            NOT_OFFERED)
    _choice("stream_format", speech.stream_format, ["audio", "sse"])
    _choice("timestamps", speech.timestamps, list(modes.TIMESTAMPS))
    if speech.timestamps == "word" and speech.stream_format != "sse":
        raise ParamError("timestamps", 'word timestamps are sent as events: use stream_format "sse" with them '
                                       '(or GET /voxcpm/jobs/ID/words after the audio)')
    check_rate(speech.sample_rate, speech.response_format)
    if speech.max_len is not None and (problem := MAX_LEN.check(speech.max_len)) is not None:
        raise ParamError("max_len", f"{problem} (a request here makes at least {MAX_LEN.low:g} patches before it "
                                    f"may stop)")
    return speech


def to_request(speech: SpeechBody, library=None, voices=None) -> SynthesisRequest:
    """The engine's request: `voice` resolved to a design (`design`, a built-in name) or a saved
    voice, cloned (continued from, in ultimate cloning, when it has a transcript and no
    `instructions` are given: a style would be read aloud there). `library`
    (ui/library/voice_store.py) and `voices(name)` -> (Voice, ReferenceClip): None without a
    library. Reads the index and may read a voice's patches: call it off the event loop."""
    voice = speech.voice.id if isinstance(speech.voice, VoiceId) else speech.voice
    if blank(voice):
        raise ParamError("voice", f"voice is required: a saved or built-in voice (GET /v1/audio/voices), or "
                                  f"{DESIGN!r} to design one from `instructions`")
    if len(voice) > MAX_VOICE_CHARS:
        raise ParamError("voice", f"parameter 'voice': String should have at most {MAX_VOICE_CHARS} characters")
    instructions = None if blank(speech.instructions) else speech.instructions.strip()
    seed = random_seed() if speech.seed is None else speech.seed
    common = dict(normalize=speech.normalize, trim_silence=speech.trim_silence,
                  **{name: value for name in TUNING if (value := getattr(speech, name)) is not None})
    designed = voice.strip().casefold() == DESIGN
    builtin = None if designed else builtin_voice(voice)
    if builtin is not None and _is_saved(voice, library):  # a saved voice of a built-in name wins
        builtin = None
    if designed or builtin is not None:
        if speech.trim_silence:
            raise ParamError("trim_silence", "trim_silence trims a reference clip, and voice design has none: "
                                             "leave it out")
        if builtin is not None:  # its description with the request's instructions, its seed unless one is given
            instructions = builtin.control(instructions)
            seed = builtin.seed if speech.seed is None else speech.seed
        return SynthesisRequest(speech.input, control=instructions, seed=seed, **common)
    if library is None:
        raise unknown_voice(f"no voice named {voice[:80]!r}: this server keeps no voice library")
    transcript = _saved(voice, library).transcript
    _, clip = voices(voice)
    if instructions is None and transcript:
        return SynthesisRequest(speech.input, reference_audio=clip, prompt_audio=clip, prompt_text=transcript.strip(),
                                seed=seed, **common)
    return SynthesisRequest(speech.input, control=instructions, reference_audio=clip, seed=seed, **common)


def _saved(voice: str, library):
    """The saved voice of that name; one unknown is refused naming this route's other choices."""
    try:
        return library.get(voice)
    except VoiceError as exc:
        if exc.status != 404:
            raise
        raise unknown_voice(str(exc)) from None


def unknown_voice(why: str) -> VoiceError:
    """A 404 for `voice` that names this route's other choices and where they are listed."""
    unknown = VoiceError(404, f"{why}; built-in voices: {', '.join(BUILTIN_VOICES)}, or {DESIGN!r} to design one "
                              f"from `instructions` (GET /v1/audio/voices lists them all)")
    unknown.param = "voice"
    return unknown


def _is_saved(voice: str, library) -> bool:
    """Whether the library holds a voice of that name (which then wins over a built-in one)."""
    if library is None:
        return False
    try:
        library.get(voice)
    except VoiceError as exc:
        if exc.status == 404:
            return False
        raise
    return True


def openai_asked(data, body=None) -> Asked:
    """What an OpenAI body asked for, read without trusting any of it, for a refusal's log line
    (from the JSON as sent: `body`, the parsed SpeechBody, adds nothing to it)."""
    if not isinstance(data, dict):
        return Asked()
    voice = data.get("voice")
    voice = voice.get("id") if isinstance(voice, dict) else voice
    voice = voice if isinstance(voice, str) else None
    designed = not blank(voice) and (voice.strip().casefold() == DESIGN or builtin_voice(voice) is not None)
    mode = "?" if blank(voice) else "design" if designed else "cloning"
    fmt = data.get("response_format", SpeechBody.model_fields["response_format"].default)
    return Asked(mode=mode, text_chars=text_length(data.get("input")), voice=voice,
                 format=fmt if isinstance(fmt, str) else None)


def _choice(field: str, value: str, accepted: list[str], why: dict[str, str] | None = None):
    """Refuses a value not accepted, naming those that are (and why not this one, where `why` says)."""
    if value not in accepted:
        reason = (why or {}).get(value.strip().lower())
        raise ParamError(field, f"{field} {value[:40]!r} is not supported: use one of {', '.join(accepted)}"
                                + (f" ({reason})" if reason else ""))


def check_rate(rate: int | None, fmt: str):
    """A sample_rate from the list, and one the format can carry (Opus has no 22.05 or 44.1 kHz)."""
    if rate is None:
        return
    if rate not in SAMPLE_RATES:
        raise _rate_refused(f"sample_rate {str(rate)[:20]} is not supported")
    if rate not in rates_for(fmt):
        raise ParamError("sample_rate", f"sample_rate {rate} cannot be sent as {fmt}: {fmt} takes "
                                        f"{', '.join(map(str, rates_for(fmt)))}")


def _rate_refused(problem: str) -> ParamError:
    return ParamError("sample_rate", f"{problem}: use one of {', '.join(map(str, SAMPLE_RATES))} (Hz), or leave "
                                     f"it out for pcm at {PCM_RATE} (as OpenAI sends it) and the other formats at "
                                     f"the model's rate")


def _described(exc: ValidationError) -> ParamError:
    """Pydantic's first complaint about the body in one sentence, naming the parameter."""
    err = exc.errors(include_url=False, include_input=False)[0]
    loc = [str(p) for p in err.get("loc", ())] or ["body"]
    param = loc[0][:40]
    where = ".".join([param] + loc[1:])[:40]
    if err.get("type") == "extra_forbidden":
        accepted = ", ".join(SpeechBody.model_fields)
        return ParamError(param, f"unknown parameter {where!r}: the accepted ones are {accepted}")
    if err.get("type") == "missing":
        return ParamError(param, f"missing required parameter {where!r}")
    if param == "sample_rate":  # a string or a fraction: still told the rates there are
        return _rate_refused("sample_rate must be a whole number of hertz")
    return ParamError(param, f"parameter {where!r}: {err.get('msg', 'invalid value')}")
