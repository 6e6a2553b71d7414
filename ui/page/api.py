"""Gradio's own API: the named endpoints that `gradio_client.Client(url).view_api()` lists and a
Space's "Use via API" page documents, on the same intake, limits, token and queue as the HTTP
routes (docs/api.md, "Gradio's client"):

    /generate         a take, whole: a WAV file and its figures (the framed stream's final status)
    /generate_stream  the same take as it is made, one item per patch (below)
    /transcribe       a clip's automatic transcript: a file, or a saved voice's name
    /voices           the saved voices, and the built-in designed ones

A take's parameters are the page's body's fields (StreamBody, ui/http/schema.py), read from it
(`TAKE`) so that they cannot drift apart; only the clip differs: a file (`reference`, what
gradio_client's handle_file sends) where the route takes an upload's id. Each take goes through
the HTTP routes' one intake (ui/http/common.admit): the body parsed once, the engine's request
built by the page's to_request, one admission (worker.submit), the same refusals, logged and
counted alike. A refusal is a gr.Error (gradio_client's AppError) with the message the route
answers, and in its title the HTTP status and the parameter at fault. Gradio's routes are behind the app's token like every
other (ui/guard/auth.py): a client sends it as a header.

/generate_stream yields each patch as the framed stream's metadata frame with its samples as `pcm`
(int16 little-endian mono at `sample_rate`, base64), then a last item with the listener's
stretch tail (empty when nothing is stretched) and the final `status`. Why base64 PCM rather than a
file or a numpy tuple per patch: a file costs gradio_client a second HTTP request per 160 ms patch and leaves one more
file in Gradio's cache, and a numpy tuple goes through Gradio's Audio component, which writes a
file too; base64 arrives inside the event itself (4/3 of the bytes), and its bytes are exactly
those POST /voxcpm/stream sends (every door reads a job through ui/http/listen.heard).
"""
# No `from __future__ import annotations` here: Gradio documents an endpoint by its annotations, and
# reads a return annotation as it is (a string would be documented as "Any").
import base64
import contextlib
import functools
import inspect
import secrets
import time
from http import HTTPStatus
from pathlib import Path

import anyio
import gradio as gr
import numpy as np
import soundfile as sf
from gradio.data_classes import FileData
from gradio.utils import get_upload_folder

from inference.errors import InputError

from ..context import AppContext
from ..guard.answers import Refusal
from ..http.builtin_voices import BUILTIN_VOICES
from ..http.clips import bytes_source, transcript_of, voice_source
from ..http.common import admit, page_asked
from ..http.frames import final_status
from ..http.schema import MissingClip, StreamBody, blank, to_request
from ..http.listen import heard
from ..http.stream import sent_meta, word_track
from ..library.uploads import read_uploaded_file
from ..services.metrics import observe_stream

FILE_HINT = "a file: gradio_client's handle_file(path)"
CLIP_SOURCES = f"send reference ({FILE_HINT}) or voice (a saved voice's name, from /voices)"
# The page's body's fields under this API's names, where they differ.
NAMES = {"reference_id": "reference"}
# A refusal's field (the body's or the engine's name, InputError.param) as this API's parameter.
PARAMS = NAMES | {"reference_audio": "reference", "prompt_audio": "reference"}
POSITIONAL = inspect.Parameter.POSITIONAL_OR_KEYWORD


def _take_parameters() -> list[inspect.Parameter]:
    """StreamBody's fields as the take's parameters, text first; the clip a file; no request id
    (the server picks it)."""
    fields = StreamBody.model_fields
    out = []
    for name in ["text", *(n for n in fields if n not in ("text", "request_id"))]:
        field = fields[name]
        annotation = FileData | None if name == "reference_id" else field.annotation
        default = inspect.Parameter.empty if field.is_required() else field.default
        out.append(inspect.Parameter(NAMES.get(name, name), POSITIONAL, default=default, annotation=annotation))
    return out


TAKE = inspect.Signature(_take_parameters())


def _signed(endpoint, returns):
    """`endpoint(*args)` with the take's signature, which Gradio reads to document and call it."""
    endpoint.__signature__ = TAKE.replace(return_annotation=returns)
    endpoint.__annotations__ = {p.name: p.annotation for p in TAKE.parameters.values()} | {"return": returns}
    return endpoint


def take_fields(args) -> dict:
    """The values Gradio called a take with, by parameter name."""
    bound = TAKE.bind(*args)
    bound.apply_defaults()
    return dict(bound.arguments)


def add_endpoints(ctx: AppContext):
    """The named endpoints, inside the page's Blocks. Gradio's queue does not limit them
    (concurrency_limit=None): the app's own limits do, as for the HTTP routes (the worker's rows and
    line, the analysis process's queue), which refuse at once where Gradio's would wait unseen."""
    async def generate(*args):
        """A take, whole: its WAV file (16-bit mono, at the model's rate) and its figures (seed,
        ttfp_s, rtf, audio_s, outcome...: the framed stream's final status)."""
        return await whole_take(ctx, take_fields(args))

    async def generate_stream(*args):
        """A take as it is made: one item per patch, `pcm` its int16 little-endian samples in
        base64; the last item holds the final `status`."""
        async for item in streamed_take(ctx, take_fields(args)):
            yield item

    async def transcribe(reference: FileData | None = None, voice: str | None = None) -> str:
        """A clip's automatic transcript (for ultimate cloning's prompt_text): a file, or a saved voice."""
        with gradio_errors():
            _one_clip(reference, voice)  # a call without a clip hears that first, whatever the model's state
            return await transcript_of(ctx, functools.partial(_clip_to_transcribe, ctx, reference, voice))

    async def voices() -> dict:
        """The saved voices (the cloning modes' `voice`) and the built-in designed ones (in voice
        design, a built-in's description as `control` and its seed as `seed`)."""
        return await voice_list(ctx)

    open_api = functools.partial(gr.api, concurrency_limit=None)
    open_api(_signed(generate, tuple[FileData, dict]), api_name="generate")
    open_api(_signed(generate_stream, dict), api_name="generate_stream")
    open_api(transcribe, api_name="transcribe")
    open_api(voices, api_name="voices")


async def whole_take(ctx: AppContext, fields: dict) -> tuple[FileData, dict]:
    entered = time.perf_counter()
    job, first, words = await _admitted(ctx, fields, "gradio-wav")
    path = Path(get_upload_folder()) / secrets.token_hex(16) / f"voxcpm-{job.id}.wav"
    path.parent.mkdir(parents=True)
    try:
        # In Gradio's cache, which serves it to the client and sweeps it with the page's other files.
        with sf.SoundFile(path, "w", ctx.worker.sample_rate, 1, "PCM_16", format="WAV") as wav:
            async with contextlib.aclosing(observe_stream(ctx.metrics, job, heard(job, first, words=words))) as audio:
                async for piece in audio:
                    wav.write(np.frombuffer(piece.int16(), "<i2"))  # the stream's rounding, sample for sample
        if words is not None:  # the figures then hold every word (or say why some are missing)
            await words.rest()
        if job.state == "failed":  # after its first audio: the framed stream's final status would say so
            raise gradio_error(500, f"the take failed after {job.patches} patches: {job.error}")
    except BaseException:  # failed, or the client left (its task cancelled): nobody will fetch the file
        path.unlink(missing_ok=True)
        path.parent.rmdir()
        raise
    return FileData(path=str(path), orig_name=path.name, mime_type="audio/wav"), _figures(ctx, job, entered)


async def streamed_take(ctx: AppContext, fields: dict):
    entered = time.perf_counter()
    job, first, words = await _admitted(ctx, fields, "gradio-stream")
    rate = ctx.worker.sample_rate
    async with contextlib.aclosing(observe_stream(ctx.metrics, job, heard(job, first, words=words))) as audio:
        async for piece in audio:
            item = {"pcm": base64.b64encode(piece.int16()).decode("ascii"), "sample_rate": rate}
            if words is not None:  # each segment's words as the framed stream's W frames carry them
                item["words"] = words.ready()
            if piece.delivery is None:  # the end: the stretch's tail, every word still to come, how the take went
                if words is not None:
                    item["words"] += await words.rest()
                yield item | {"offset": piece.offset, "samples": len(piece.audio),
                              "status": _figures(ctx, job, entered)}
            else:
                yield sent_meta(piece, job) | item


async def _admitted(ctx: AppContext, fields: dict, fmt: str):
    """(job, its first Delivery, its WordTrack when it asked for timestamps): the call's values as
    the page's body, through the routes' intake."""
    reference = fields["reference"]
    body = {name: value for name, value in fields.items() if value is not None and name != "reference"}
    clips = ctx.clips
    if reference is not None:
        body["reference_id"], clips = SentClip.ID, SentClip(ctx.clips, reference)

    async def read():
        return body
    with gradio_errors():
        job, body, first = await admit(ctx, read, build=functools.partial(to_request, clips=clips, voices=ctx.voice_lookup),
                                       describe=functools.partial(page_asked, fmt=fmt))
    words = word_track(ctx, job, ctx.worker.sample_rate) if body.timestamps == "word" else None
    return job, first, words


def _figures(ctx: AppContext, job, entered: float) -> dict:
    """The take's figures, as the framed stream's final status frame gives them (ui/http/stream.py)."""
    return final_status(job, seed=job.seed, intake_s=job.queued_at - entered, **ctx.build)


class SentClip:
    """The clip file a call sent, found where to_request looks an upload's id up (`get`), so the
    request is built and checked as the page's is: decoded and checked as an upload is
    (UploadStore.unkept) on serving's intake thread, and held by the request alone."""
    ID = "clip-sent-with-the-call"

    def __init__(self, clips, value):
        self.clips, self.value = clips, value

    def get(self, clip_id: str):
        try:
            data = read_uploaded_file(file_path(self.value), get_upload_folder(), self.clips.max_bytes)
            return self.clips.unkept(data)
        except InputError as exc:  # about the file: said as the parameter's
            raise InputError(f"reference: {exc}", "reference_id") from None


def file_path(value) -> str:
    """The path of a file parameter as Gradio hands it over (a FileData's fields), checked by
    read_uploaded_file to lie in Gradio's upload folder before anything reads it."""
    if isinstance(value, dict) and isinstance(value.get("path"), str):
        return value["path"]
    raise InputError(f"the clip must be {FILE_HINT}", "reference_id")


async def _clip_to_transcribe(ctx: AppContext, reference, voice: str | None, model: str):
    """/transcribe's clip, as POST /voxcpm/transcribe reads its file or saved voice (ui/http/clips.py)."""
    _one_clip(reference, voice)
    if reference is None:
        return await anyio.to_thread.run_sync(voice_source, ctx, voice, False, model)
    try:
        data = await anyio.to_thread.run_sync(read_uploaded_file, file_path(reference), get_upload_folder(),
                                              ctx.clips.max_bytes)
        return await bytes_source(ctx, data, model)
    except Refusal:
        raise
    except InputError as exc:
        raise InputError(f"reference: {exc}", "reference_id") from None


def _one_clip(reference, voice: str | None):
    if (reference is None) == blank(voice):
        raise InputError(f"give one clip: reference ({FILE_HINT}) or voice (a saved voice's name)", "reference_id")


async def voice_list(ctx: AppContext) -> dict:
    library = ctx.voices
    with gradio_errors():
        saved = [] if library is None else await anyio.to_thread.run_sync(library.list)
    builtin = [{"name": v.name, "description": v.description, "seed": v.seed} for v in BUILTIN_VOICES.values()]
    return {"saved": [voice.public() for voice in saved], "builtin": builtin}


@contextlib.contextmanager
def gradio_errors():
    """The routes' refusals as Gradio's client reads them: the route's message (in this API's terms
    where its fields differ), and in the title the HTTP status and the parameter at fault."""
    try:
        yield
    except MissingClip as exc:
        raise gradio_error(400, str(MissingClip(CLIP_SOURCES)), param=exc.param) from None
    except Refusal as exc:
        raise gradio_error(exc.status, str(exc), exc.headers, exc.param) from None
    except InputError as exc:
        raise gradio_error(400, str(exc), param=exc.param) from None


def gradio_error(status: int, message: str, headers: dict | None = None, param: str | None = None) -> gr.Error:
    """A refusal as a gr.Error: its message as is; its title the status, then the parameter at
    fault ("400 Bad Request: cfg_value") or when to try again ("503 Service Unavailable: try again
    in 5 s"). Not printed: the refusal has its log line already (ui/http/common.admit)."""
    try:
        title = f"{status} {HTTPStatus(status).phrase}"
    except ValueError:
        title = f"{status} refused"
    field = PARAMS.get(param, param)
    if field in TAKE.parameters:
        title += f": {field}"
    if (headers or {}).get("Retry-After"):
        title += f": try again in {headers['Retry-After']} s"
    return gr.Error(message, title=title, print_exception=False)
