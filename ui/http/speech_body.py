"""The body of POST /v1/audio/speech (OpenAI's, with vLLM-Omni's fields and our extensions; the live
socket's session.config shares its voice fields) and the engine's SynthesisRequest it becomes
(to_request): the body's own model checks, as it is read, what only this route's fields can get
wrong (VoiceFields.served); the route resolves `voice` or decodes the clip sent; every value the
engine takes is checked by the engine, once, against the one spec (inference/request/modes.py).

Every refusal names the OpenAI parameter to change (InputError.param, sent as OpenAI's `param`)
in the route's own terms (openai_param: the engine's `text` is `input` here), and the settings
it does not take (min_len) never appear in its messages.
"""
from __future__ import annotations

import dataclasses
import functools
import re
from typing import ClassVar, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError, create_model, model_validator

from inference.errors import InputError
from inference.request import modes
from inference.request.audio_input import decode_base64
from inference.request.request import SynthesisRequest

from .builtin_voices import BUILTIN_VOICES, builtin_voice
from .common import Asked, text_length
from .schema import blank, random_seed
from ..library.voice_names import RESERVED
from ..library.voice_store import VoiceError
from ..services.audio import FORMATS, NOT_OFFERED, PCM_RATE, SAMPLE_RATES, missing_formats, rates_for

MODEL_ID = "voxcpm2"
# OpenAI's speech models are names for the one model here, so a client written for OpenAI only
# changes its base URL. Compared without regard to case.
OPENAI_MODELS = ("tts-1", "tts-1-hd", "gpt-4o-mini-tts")
MODEL_NAMES = (MODEL_ID, "openbmb/voxcpm2") + OPENAI_MODELS
DESIGN, DEFAULT_VOICE = RESERVED  # "design": from `instructions`; "default": VoxCPM2 with no voice prompt
# The page's and the engine's fields under the names this route gives them: a refusal's `param`
# (InputError.param) is told in this route's terms, or as null when it names no field of this body.
OPENAI_NAMES = {"text": "input", "control": "instructions"}
# The route takes no min_len, so each request keeps its default: max_len may not go below it, and
# the refusal says so in this route's terms (the engine's would name min_len, which it has not).
_MAX_LEN = modes.SETTINGS["max_len"]
MAX_LEN = dataclasses.replace(_MAX_LEN, low=max(_MAX_LEN.low, modes.default("min_len")))


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


class VoiceFields(BaseModel):
    """What says the voice and the sound, in the POST body and in the live socket's session.config
    alike: OpenAI's fields, vLLM-Omni's (its clients send them to both doors) and our extensions."""
    model_config = ConfigDict(extra="forbid", strict=True)
    request_id: ClassVar[None] = None  # neither body names a request id: the server picks one
    model: str = MODEL_ID  # optional, as in vLLM-Omni: there is one model here
    # vLLM-Omni calls the voice `speaker` too.
    voice: str | VoiceId | None = Field(None, validation_alias=AliasChoices("voice", "speaker"))
    instructions: str | None = None
    # A clip, as vLLM-Omni takes one (a data: URL of base64 audio; never fetched), or ours by id (POST
    # /voxcpm/upload); with its transcript, ultimate cloning. prompt_audio + prompt_text: VoxCPM2's own
    # names for the clip continued and its transcript (vLLM-Omni's VoxCPM2 demo sends them).
    ref_audio: str | None = None
    ref_text: str | None = None
    reference_id: str | None = None
    prompt_audio: str | None = None
    prompt_text: str | None = None
    seed: int | None = None
    normalize: bool = False
    trim_silence: bool = False
    sample_rate: int | None = None  # None: 24 kHz for pcm (OpenAI's), the model's for the other formats
    max_new_tokens: int | None = None  # vLLM-Omni's name for max_len: VoxCPM2's tokens are its patches
    # vLLM-Omni's fields for its other models (IGNORED): accepted, so that its clients work unchanged, and
    # not used, as vLLM-Omni does not use them for VoxCPM2 either (docs/api.md says why for each).
    task_type: Literal["CustomVoice", "VoiceDesign", "Base"] | None = None
    language: str | None = Field(None, max_length=64)
    x_vector_only_mode: bool | None = None
    speaker_embedding: list[float] | None = Field(None, max_length=8192)
    initial_codec_chunk_frames: int | None = Field(None, ge=0)
    non_streaming_mode: bool | None = None
    extra_params: dict | None = None

    # Checked as the body is read, so that a door's body is parsed and checked in one step, before any
    # request is built from it. An after-validator: it runs only once every field has its JSON type, so
    # a wrong type is still the refusal told first. Its ParamError reaches the client as raised
    # (validated). Every subclass has a response_format, each door's with its own default.
    @model_validator(mode="after")
    def served(self):
        """What only these doors' fields can get wrong: the model, the format and rate, max_len or its
        alias; after the door's own fields (own_choices)."""
        self.own_choices()
        if self.model.lower() not in MODEL_NAMES:
            raise ParamError("model", f"model {self.model[:80]!r} is not served here: use one of "
                                      f"{', '.join((MODEL_ID,) + OPENAI_MODELS)} (GET /v1/models), or leave it out")
        fmt = self.response_format
        _choice("response_format", fmt, [f for f in FORMATS if f not in missing_formats()], NOT_OFFERED)
        check_rate(self.sample_rate, fmt)
        if self.max_len is not None and self.max_new_tokens is not None and self.max_len != self.max_new_tokens:
            raise ParamError("max_new_tokens", "max_new_tokens and max_len are the same setting (patches of 160 ms): "
                                               "give one of them")
        max_len = self.asked_max_len
        if max_len is not None and (problem := MAX_LEN.check(max_len)) is not None:
            name = "max_len" if self.max_len is not None else "max_new_tokens"
            raise ParamError(name, f"{problem.replace('max_len', name)} (a request here makes at least "
                                   f"{MAX_LEN.low:g} patches before it may stop)")
        return self

    def own_choices(self):
        """A door's fields that the other door has not, checked first (the socket's are checked after)."""

    @property
    def asked_max_len(self) -> int | None:
        """max_len, under its name or vLLM-Omni's (served() has refused two that differ)."""
        return self.max_len if self.max_len is not None else self.max_new_tokens


# vLLM-Omni's fields that VoxCPM2 does not use: accepted and ignored (docs/api.md).
IGNORED = ("task_type", "language", "x_vector_only_mode", "speaker_embedding", "initial_codec_chunk_frames",
           "non_streaming_mode", "extra_params")


class OpenAIFields(VoiceFields):
    input: str
    response_format: str = "mp3"
    stream_format: str | None = None  # "audio" unless `stream` asks for events
    stream: bool | None = None  # vLLM-Omni's: true without a stream_format means events (sse)
    timestamps: str = modes.TIMESTAMPS[0]  # "word": each segment's words timed, as events (sse only)
    word_timestamps: bool = False  # vLLM-Omni's switch for the same, with events

    def own_choices(self):
        _choice("stream_format", self.stream_format or "audio", ["audio", "sse"])
        _choice("timestamps", self.timestamps, list(modes.TIMESTAMPS))
        if self.word_timestamps and self.events:
            self.timestamps = "word"
        if self.timestamps == "word" and not self.events:
            raise ParamError("timestamps", 'word timestamps are sent as events: use stream_format "sse" with them '
                                           '(or GET /voxcpm/jobs/ID/words after the audio)')

    @property
    def events(self) -> bool:
        """The audio as SSE events rather than the file's bytes."""
        return self.stream_format == "sse" or (self.stream_format is None and bool(self.stream))


# The spec's numeric settings these bodies take (OpenAI's pace field among them; min_len not), each
# None (or absent) for its default: checked against its range once, by the engine's request.
TUNING = tuple(name for name in modes.TUNING if name != "min_len")


def with_tuning(name: str, base: type[BaseModel]) -> type[BaseModel]:
    """`base` with the spec's numeric settings this door takes."""
    return create_model(name, __base__=base, **{n: (modes.field_type(n) | None, None) for n in TUNING})


SpeechBody = with_tuning("SpeechBody", OpenAIFields)


def validated(model: type[BaseModel], raw):
    """`raw` read as `model` and checked by its validators, refused in one sentence naming the parameter."""
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        raise _described(exc, model) from None


# The OpenAI body read and checked whole by SpeechBody itself; validated is the door's one step (a
# function wrapping it would be one more hop from the route to the engine).
parse_speech = functools.partial(validated, SpeechBody)


def to_request(speech: VoiceFields, text: str | None = None, library=None, voices=None, clips=None, *,
               max_voice_chars: int) -> SynthesisRequest:
    """The engine's request for `text`: a clip (ref_audio, prompt_audio or reference_id) cloned,
    continued from in ultimate cloning when its transcript is given; else `voice` resolved to a
    design (`design`, `default` or none, a built-in name) or a saved voice, cloned (continued from
    when it has a transcript and no `instructions` are given: a style would be read aloud there).
    `library` (ui/library/voice_store.py) and `voices(name)` -> (Voice, ReferenceClip): None
    without a library; `clips`: the upload store (ui/library/uploads.py), which decodes a data: URL
    without keeping it; `max_voice_chars`: the settings' longest `voice` (as the page's body's).
    Reads the index, a voice's patches, a clip: call it off the event loop. `text`: the body's
    `input` unless given (a live session's utterance)."""
    text = speech.input if text is None else text
    voice = speech.voice.id if isinstance(speech.voice, VoiceId) else speech.voice
    if voice is not None and len(voice) > max_voice_chars:
        raise ParamError("voice", f"parameter 'voice': String should have at most {max_voice_chars} characters")
    instructions = None if blank(speech.instructions) else speech.instructions.strip()
    seed = random_seed() if speech.seed is None else speech.seed
    common = dict(normalize=speech.normalize, trim_silence=speech.trim_silence,
                  **{name: value for name in TUNING if (value := getattr(speech, name)) is not None})
    if (max_len := speech.asked_max_len) is not None:
        common["max_len"] = max_len
    unnamed = blank(voice) or voice.strip().casefold() == DEFAULT_VOICE
    if any(v is not None for v in (speech.ref_audio, speech.prompt_audio, speech.reference_id)):
        if not unnamed:
            raise ParamError("voice", f"give either a voice ({voice[:40]!r}) or a clip (ref_audio, prompt_audio or "
                                      f"reference_id), not both")
        return _cloned(speech, text, clips, instructions, seed, common)
    if speech.ref_text is not None or speech.prompt_text is not None:
        name = "ref_text" if speech.ref_text is not None else "prompt_text"
        raise ParamError(name, f"{name} is the transcript of a clip: send the clip too (ref_audio, a data: URL)")
    designed = unnamed or voice.strip().casefold() == DESIGN
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
        return SynthesisRequest(text, control=instructions, seed=seed, **common)
    if library is None:
        raise unknown_voice(f"no voice named {voice[:80]!r}: this server keeps no voice library")
    transcript = _saved(voice, library).transcript
    _, clip = voices(voice)
    if instructions is None and transcript:
        return SynthesisRequest(text, reference_audio=clip, prompt_audio=clip, prompt_text=transcript.strip(),
                                seed=seed, **common)
    return SynthesisRequest(text, control=instructions, reference_audio=clip, seed=seed, **common)


def _cloned(speech: VoiceFields, text: str, clips, instructions, seed, common) -> SynthesisRequest:
    """A request that brings its clip: the reference (ref_audio or reference_id) and the clip
    continued (prompt_audio, else the reference when a transcript is given)."""
    if speech.ref_audio is not None and speech.reference_id is not None:
        raise ParamError("ref_audio", "give the clip once: ref_audio (a data: URL) or reference_id, not both")
    decoded = {}

    def clip(url: str, name: str):
        if url not in decoded:
            decoded[url] = clips.unkept(data_url_bytes(url, name, clips.max_bytes)).as_engine_input()
        return decoded[url]
    reference = clip(speech.ref_audio, "ref_audio") if speech.ref_audio is not None else \
        clips.get(speech.reference_id).as_engine_input() if speech.reference_id is not None else None
    prompt = clip(speech.prompt_audio, "prompt_audio") if speech.prompt_audio is not None else None
    transcript = speech.prompt_text if speech.prompt_text is not None else speech.ref_text
    if blank(transcript):
        if prompt is not None:
            raise ParamError("prompt_text", "prompt_audio is continued from, which needs its exact transcript: "
                                            "give prompt_text, or send the clip as ref_audio to clone its voice")
        return SynthesisRequest(text, control=instructions, reference_audio=reference, seed=seed, **common)
    prompt = prompt if prompt is not None else reference
    # A style is passed on so that SynthesisRequest refuses it with its own message (it would be read aloud).
    return SynthesisRequest(text, control=instructions, reference_audio=reference if reference is not None else prompt,
                            prompt_audio=prompt, prompt_text=transcript.strip(), seed=seed, **common)


def data_url_bytes(url, name: str, limit: int) -> bytes:
    """A clip sent in the body: a data: URL of base64 audio (a URL is never fetched, a path never read),
    strictly base64 (no other characters, padding only at the end)."""
    if not isinstance(url, str) or not url.startswith("data:") or ";base64," not in url[:100]:
        raise ParamError(name, f"{name} must be a data: URL of base64 audio (data:audio/wav;base64,...): this server "
                               f"fetches no URLs and reads no paths; or upload the clip (POST /voxcpm/upload) and "
                               f"send its reference_id")
    encoded = url.split(";base64,", 1)[1]
    if len(encoded) * 3 // 4 > limit:
        raise ParamError(name, f"{name} holds more than {limit // 2**20} MiB of audio")
    try:
        return decode_base64(encoded)
    except ValueError:
        raise ParamError(name, f"{name} is not valid base64") from None


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
    unknown = VoiceError(404, f"{why}; built-in voices: {', '.join(BUILTIN_VOICES)}, {DESIGN!r} to design one "
                              f"from `instructions`, or {DEFAULT_VOICE!r} for VoxCPM2 with no voice prompt (GET "
                              f"/v1/audio/voices lists them all)")
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
    voice = data.get("voice", data.get("speaker"))
    voice = voice.get("id") if isinstance(voice, dict) else voice
    voice = voice if isinstance(voice, str) else None
    clip = any(data.get(name) is not None for name in ("ref_audio", "prompt_audio", "reference_id"))
    transcript = any(data.get(name) is not None for name in ("ref_text", "prompt_text"))
    designed = blank(voice) or voice.strip().casefold() in RESERVED or builtin_voice(voice) is not None
    mode = ("ultimate" if transcript else "cloning") if clip else "design" if designed else "cloning"
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


def _described(exc: ValidationError, model: type[BaseModel]) -> InputError:
    """Pydantic's first complaint about the body in one sentence, naming the parameter."""
    err = exc.errors(include_url=False, include_input=False)[0]
    if isinstance(refused := err.get("ctx", {}).get("error"), InputError):  # a validator's own (served)
        return refused
    loc = [str(p) for p in err.get("loc", ())] or ["body"]
    param = loc[0][:40]
    where = ".".join([param] + loc[1:])[:40]
    if err.get("type") == "extra_forbidden":
        accepted = ", ".join(f"{n} (or speaker)" if n == "voice" else n for n in model.model_fields)
        return ParamError(param, f"unknown parameter {where!r}: the accepted ones are {accepted}")
    if err.get("type") == "missing":
        return ParamError(param, f"missing required parameter {where!r}")
    if err.get("type") == "literal_error":  # its accepted values, as pydantic words them
        return ParamError(param, f"parameter {where!r}: {err.get('msg', 'invalid value')}")
    if param == "sample_rate":  # a string or a fraction: still told the rates there are
        return _rate_refused("sample_rate must be a whole number of hertz")
    return ParamError(param, f"parameter {where!r}: {err.get('msg', 'invalid value')}")
