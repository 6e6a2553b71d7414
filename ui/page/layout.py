"""The Gradio page: three modes, advanced settings, Generate/Stop, and the player panel.

Generation does not go through a Gradio event's server side: the buttons' js= hooks hand the form
to the page's player (static/page/gradio.js, the page's one adapter to Gradio), which streams PCM
from the HTTP route. The only Python handlers here turn an uploaded or recorded clip into a
server-side id, so the audio crosses the network once; they and the examples' loaders are private
(no API name: gradio_client cannot call them). The API Gradio's client calls is ui/page/api.py's
named endpoints. The modes' titles and help and every setting's range, default, label and help
come from the spec, inference/request/modes.py.
"""
from __future__ import annotations

import contextlib
import html
import json
import logging

import gradio as gr
from gradio.utils import get_upload_folder as gradio_upload_folder

from inference.errors import InputError
from inference.request import modes

from .api import add_endpoints
from .examples import cloning_examples, design_examples, example_clip, ultimate_examples
from .panel import LIVE_TEXT, VOICE_PICKER, panel_html, voice_panel_html
from .workbench import http_routes_html, workbench_html
from ..context import AppContext
from ..library.uploads import UploadStore, client_key, read_uploaded_file

log = logging.getLogger("voxcpm.ui")

# The form's fields in the order the Generate hook hands their values to the page. A mode's inputs are
# named <mode>_control, <mode>_ref (its clip's id), <mode>_audio and <mode>_transcript, which is how
# static/player/server.js finds what the spec says the mode reads.
FIELDS = ["mode", "text", "design_control", "cloning_ref", "cloning_control", "ultimate_ref", "ultimate_transcript",
          "cfg_value", "inference_timesteps", "seed", "random_seed", "max_len", "cloning_audio", "ultimate_audio",
          "normalize", "trim_silence", "speed", "word_timestamps"]
FILLED = [name for name in FIELDS if not name.endswith("_audio")]  # what Re-use settings may set back
TRANSCRIPT_NOTE = ('<div id="vox-ultimate-transcript-note" class="vox-transcript-note" data-state="" role="status" '
                   'aria-live="polite"></div>')
# What came back of the last visit's form after a reload, and what did not (static/page/keep.js).
FORM_NOTE = '<div id="vox-form-note" class="vox-form-note" role="status" aria-live="polite"></div>'
SKIP_TO_GENERATE = ('<a class="vox-skip" href="#vox-generate" data-skip-to="vox-generate">Skip to Generate '
                    '(Ctrl+Enter generates from anywhere)</a>')
# The examples' loaders are the page's own: without an API name, gradio_client cannot call them
# (it used to list load_example, which fails without the page's inputs).
EXAMPLES = dict(label="Examples", api_visibility="private")
# The adapter module, where the page's module script (ui/server.py) finds it, relative to the page.
ADAPTER = "voxcpm/static/page/gradio.js"

INTRO = """# VoxCPM2 streaming demo
Speech starts playing while it is generated: the audio streams into a gapless AudioWorklet player,
the panel beside the form (below it on a phone) shows how fast it came, and every take is kept
in the listening-QA workbench at the bottom of the page."""


def served_line(model: str, lora: str | None) -> str | None:
    """A small line under the title naming the LoRA served (--lora); none without one."""
    if lora is None:
        return None
    return (f'<div class="vox-served">Model: {html.escape(model)}, with the LoRA <code>{html.escape(lora)}</code> '
            "merged into its weights</div>")


class Page(gr.Blocks):
    """The page's Blocks, whose queue can be paced: `queue(poll_s=...)`."""

    def queue(self, *args, poll_s: float | None = None, **kwargs):
        """Gradio's queue, which looks for work every `poll_s` while it has none and sends progress
        no more often than ten times that (PageSettings.gradio_poll_ms; Gradio's own 1 ms woke the
        event loop a thousand times a second). Gradio has no option for either: these are the
        attributes its queue's loops read (tests/unit/test_every_setting_takes_effect.py checks that
        they still do)."""
        super().queue(*args, **kwargs)
        if poll_s is not None:
            self._queue.sleep_when_free, self._queue.progress_update_sleep_when_free = poll_s, 10 * poll_s
        return self


def build_blocks(clips: UploadStore, *, sample_rate: int, prebuffer_ms: float, max_text_chars: int,
                 notice: str | None = None, served: str | None = None,
                 api: AppContext | None = None) -> Page:
    """The page; with `api` (the app it is served by), Gradio's named endpoints on that app's intake
    (ui/page/api.py). A page built alone (the page contract's test) has none."""
    # Clips uploaded or recorded through the page are copied into the engine's own store at once;
    # Gradio's files of them are swept hourly instead of piling up in its temp folder.
    with Page(title="VoxCPM2 streaming demo", analytics_enabled=False, delete_cache=(3600, 3600)) as demo:
        gr.Markdown(INTRO)
        if served:
            gr.HTML(served, js_on_load=None, elem_id="vox-served-box")
        if notice:
            gr.HTML(f'<div class="vox-banner" role="alert">{notice}</div>', js_on_load=None, elem_id="vox-banner-box")
        with gr.Row(equal_height=False):
            with gr.Column(scale=3, elem_id="vox-form-column"):  # its changes are kept (static/page/keep.js)
                gr.HTML(FORM_NOTE, js_on_load=None, elem_id="vox-form-note-box")
                form = _form(clips, max_text_chars)
                with gr.Accordion("Live text: speak while it is being written", open=False, elem_id="vox-live-text"):
                    gr.HTML(LIVE_TEXT, js_on_load=None, elem_id="vox-live-box")
            with gr.Column(scale=2, min_width=360):
                with gr.Row(elem_id="vox-actions"):  # beside the panel: the buttons and what they do stay in view
                    generate = gr.Button("Generate", variant="primary", elem_id="vox-generate")
                    stop = gr.Button("Stop", variant="stop", elem_id="vox-stop")
                form["word_timestamps"] = _word_timestamps()
                gr.HTML(panel_html(sample_rate, prebuffer_ms), js_on_load=None, elem_id="vox-panel-box")
        gr.HTML(workbench_html(), js_on_load=None, elem_id="vox-workbench-box")
        gr.HTML(http_routes_html(), js_on_load=None, elem_id="vox-http-box")
        _hooks(form, generate, stop)
        if api is not None:
            add_endpoints(api)
    return demo


def hook(call: str, params: str = "") -> str:
    """A js= hook that calls `call` in the adapter module (static/page/gradio.js). It imports the
    module by the URL the page's own module script resolves it to, so it reaches that same
    instance: no window global. Gradio awaits the promise and sets the event's outputs from it."""
    return (f"({params}) => import(new URL({json.dumps(ADAPTER)}, document.baseURI).href)"
            f".then((gradio) => gradio.{call})")


def _hooks(form: dict, generate: gr.Button, stop: gr.Button):
    generate.click(None, inputs=[form[name] for name in FIELDS], outputs=None,
                   js=hook(f"generate({json.dumps(FIELDS)}, values)", "...values"))
    stop.click(None, js=hook("stop()"))
    # Re-use settings (the workbench) puts a take's settings back through this hidden button's hook,
    # so Gradio sets them even in a closed accordion or a tab not drawn yet.
    # Live text (static/player/live.js) reads the form as Gradio holds it through this one's hook.
    read = gr.Button("Read the form", visible="hidden", elem_id="vox-read")
    read.click(None, inputs=[form[name] for name in FIELDS], outputs=None,
               js=hook(f"read({json.dumps(FIELDS)}, values)", "...values"))
    fill = gr.Button("Fill the form", visible="hidden", elem_id="vox-fill")
    filled = [form[name] for name in FILLED]
    fill.click(None, inputs=filled, outputs=filled, js=hook(f"filled({json.dumps(FILLED)}, values)", "...values"))


def _form(clips: UploadStore, max_text_chars: int) -> dict:
    form = {"mode": gr.Textbox("design", visible="hidden", elem_id="vox-mode")}
    pauses = modes.spec_json()["pauses"]
    # The first example's, so that a first Generate speaks at once instead of refusing an empty text.
    form["text"] = gr.Textbox(design_examples()[0][0], label="Text to speak", lines=3, max_length=max_text_chars,
                              elem_id="vox-text", placeholder="What should be said?",
                              info=f"A pause: {' or '.join(pauses['forms'][::2])} ({pauses['min_ms']:g} ms to "
                                   f"{pauses['max_ms'] / 1000:g} s of silence there)")
    # From the text box, Generate was 10 to 34 Tab stops away (issue 58): the next stop is a link
    # straight to it, drawn only while it has the focus (static/page/gradio.js moves the focus).
    gr.HTML(SKIP_TO_GENERATE, js_on_load=None, elem_id="vox-skip-box")
    # Off by default, as in the official app; long texts are split into sentences either way.
    form["normalize"] = gr.Checkbox(False, label="Read numbers, dates and units as words (text normalization)",
                                    elem_id="vox-normalize")
    with gr.Tabs(elem_id="vox-modes"):
        _design_tab(form)
        _cloning_tab(form, clips)
        _ultimate_tab(form, clips)
    with gr.Accordion("Voice library", open=False, elem_id="vox-voice-library"):
        gr.HTML(voice_panel_html(), elem_id="vox-voices-box")
    form.update(_advanced())
    return form


@contextlib.contextmanager
def _mode_tab(name: str, form: dict):
    """A mode's tab, titled and explained as the spec says. Selecting it only sets the hidden mode
    field in the page: no round trip to the server."""
    mode = modes.MODES[name]
    with gr.Tab(mode.title, id=name, elem_id=f"vox-tab-{name}") as tab:
        gr.Markdown(mode.help)
        yield tab
    tab.select(None, outputs=form["mode"], js=f"() => {json.dumps(name)}")


def _design_tab(form: dict):
    with _mode_tab("design", form):
        form["design_control"] = gr.Textbox(design_examples()[0][1], label="Voice description", lines=2,
                                            elem_id="vox-description",
                                            placeholder="e.g. A warm, slightly husky female voice, speaking slowly")
        gr.Examples(design_examples(), [form["text"], form["design_control"]], **EXAMPLES)


def _cloning_tab(form: dict, clips: UploadStore):
    with _mode_tab("cloning", form):
        gr.HTML(VOICE_PICKER.format(mode="cloning"), elem_id="vox-cloning-voice")
        audio, form["cloning_ref"] = _clip_input(clips, "clone")
        form["cloning_audio"] = audio  # its file name goes into the take's settings
        form["cloning_control"] = gr.Textbox(label="Style instruction (optional)", elem_id="vox-clone-style",
                                             placeholder="e.g. Whispering, a little out of breath")
        gr.Examples(cloning_examples(), [form["text"], audio, form["cloning_control"]], **EXAMPLES)


def _ultimate_tab(form: dict, clips: UploadStore):
    with _mode_tab("ultimate", form):
        gr.HTML(VOICE_PICKER.format(mode="ultimate"), elem_id="vox-ultimate-voice")
        audio, form["ultimate_ref"] = _clip_input(clips, "ultimate")
        form["ultimate_audio"] = audio
        form["ultimate_transcript"] = gr.Textbox(label="Exact transcript of the clip", lines=2,
                                                 elem_id="vox-ultimate-transcript")
        # Filled in by the server's speech recognition once a clip is stored (static/voices/transcript.js).
        gr.HTML(TRANSCRIPT_NOTE, elem_id="vox-ultimate-transcript-note-box")
        form["ultimate_ref"].change(None, inputs=form["ultimate_ref"], js=hook("clipStored('ultimate', id)", "id"))
        fill = gr.Button("Fill the transcript", visible="hidden", elem_id="vox-fill-transcript")
        fill.click(None, inputs=form["ultimate_transcript"], outputs=form["ultimate_transcript"],
                   js=hook("filledTranscript(value)", "value"))
        gr.Examples(ultimate_examples(), [form["text"], audio, form["ultimate_transcript"]], **EXAMPLES)


def _clip_input(clips: UploadStore, name: str) -> tuple[gr.Audio, gr.Textbox]:
    audio = gr.Audio(label="Reference clip (upload or record)", sources=["upload", "microphone"],
                     type="filepath", elem_id=f"vox-{name}-audio")
    clip_id = gr.Textbox(visible="hidden", elem_id=f"vox-{name}-ref")
    note = gr.Markdown(elem_id=f"vox-{name}-note")
    # Forget the old id in the page at once, so a quick Generate cannot use the previous clip; and
    # an error the panel shows about the clip is stale once a new one is given.
    audio.change(None, outputs=clip_id, js=hook("clipChanged()"))

    def store(path: str | None, request: gr.Request) -> tuple[str, str]:
        address = request.client.host if request is not None and request.client else None
        return register_clip(clips, path, client=client_key(address))
    audio.change(store, audio, [clip_id, note], api_visibility="private", show_progress="minimal")
    # Re-use settings (the workbench) puts a take's kept clip back in the box through this hidden
    # button's hook: the box shows the clip that will be used, and its change (above) stores it.
    fill = gr.Button("Put a clip in the box", visible="hidden", elem_id=f"vox-{name}-fill-clip")
    fill.click(None, outputs=audio, js=hook("filledClip()"))
    return audio, clip_id


def register_clip(clips: UploadStore, path: str | None, upload_root: str | None = None,
                  client: str | None = None) -> tuple[str, str]:
    """Gradio has stored the upload or recording in its own folder; decode it once and hand the
    page an id. Only files in that folder are read: the path comes from the client, and Gradio does
    not check it for an app mounted on FastAPI. An example clip is read from assets/ instead:
    Gradio's copy of it may have been deleted by another app's shutdown (ui/page/examples.py)."""
    if not path:
        return "", ""
    try:
        root = upload_root or gradio_upload_folder()
        example = example_clip(path, root)
        data = example.read_bytes() if example is not None else read_uploaded_file(path, root, clips.max_bytes)
        clip_id, clip = clips.add_bytes(data, client)
    except InputError as exc:
        return "", f"⚠️ {exc}"
    except Exception:  # the reason (and any path in it) belongs in the log, not on the page
        log.exception("storing a clip failed")
        return "", "⚠️ the clip could not be stored because of an error on the server; try again"
    minutes = clips.ttl_s / 60
    return clip_id, (f"Reference ready: {clip.seconds:.1f} s, from {clip.source_rate} Hz × {clip.source_channels} "
                     f"channel(s) (kept {minutes:.0f} min).")


def _word_timestamps() -> gr.Checkbox:
    """Beside the player, whose panel shows the words: asks the stream for each segment's words
    (`"timestamps": "word"`, static/player/server.js), which the server aligns as it goes. Off by
    default: the alignment is work for the server's recognizer that most takes need not cost."""
    return gr.Checkbox(False, label="Show words as they play (word timestamps)", elem_id="vox-word-timestamps",
                       info="The server aligns each segment's audio to its text; the words follow the player "
                            "and stay with the take in the workbench")


def _advanced() -> dict:
    with gr.Accordion("Advanced settings", open=False, elem_id="vox-advanced"):
        with gr.Row():
            cfg = _slider("cfg_value", "vox-cfg")
            steps = _slider("inference_timesteps", "vox-steps")
        with gr.Row():
            random_seed = gr.Checkbox(True, label="Random seed", elem_id="vox-random-seed")
            seed = _seed()
            max_len = _slider("max_len", "vox-max-len")
        speed = _slider("speed", "vox-speed")  # applied as it streams (inference/request/listener.py)
        # Off by default: a clean clip needs nothing, and editing the user's audio should be asked for.
        trim = gr.Checkbox(False, label="Cloning: trim the silence at the clip's ends (voice activity detection)",
                           elem_id="vox-trim-silence")
    return {"cfg_value": cfg, "inference_timesteps": steps, "seed": seed, "random_seed": random_seed,
            "max_len": max_len, "trim_silence": trim, "speed": speed}


def _slider(name: str, elem_id: str) -> gr.Slider:
    """A setting as the spec states it; the slider stops at its page_high where it has one."""
    s = modes.SETTINGS[name]
    high = s.high if s.page_high is None else s.page_high
    return gr.Slider(s.low, high, value=s.default, step=s.step, label=s.label, info=s.help, elem_id=elem_id)


def _seed() -> gr.Number:
    """The spec's default (none: drawn at random) is the Random seed box, ticked; this box starts at
    the lowest seed and stops below PAGE_SEED_LIMIT: the page's numbers are JavaScript's, exact only
    to 2**53."""
    s = modes.SETTINGS["seed"]
    return gr.Number(s.low, label=s.label, info=s.help, precision=0, minimum=s.low, step=s.step,
                     maximum=modes.PAGE_SEED_LIMIT - 1, elem_id="vox-seed")
