"""The Gradio page: three modes, advanced settings, Generate/Stop, and the player panel.

Generation does not go through a Gradio event: the buttons call the page's player (static/app.js),
which streams PCM from the HTTP route. The only Python handlers here turn an uploaded or recorded
clip into a server-side id, so the audio crosses the network once.
"""
from __future__ import annotations

import json
import logging

import gradio as gr
from gradio.utils import get_upload_folder as gradio_upload_folder

from inference.errors import InputError

from .examples import cloning_examples, design_examples, example_clip, ultimate_examples
from .panel import panel_html
from .workbench import http_routes_html, workbench_html
from ..library.uploads import UploadStore, client_key, read_uploaded_file
from .voice_panel import VOICE_PICKER, voice_panel_html

log = logging.getLogger("voxcpm.ui")

# The order in which the Generate button hands the form's values to window.voxcpm.generate.
FIELDS = ["mode", "text", "description", "clone_ref", "clone_style", "ultimate_ref", "ultimate_transcript",
          "cfg_value", "inference_timesteps", "seed", "random_seed", "max_len", "clone_audio", "ultimate_audio",
          "normalize", "trim_silence"]

INTRO = """# VoxCPM2 streaming demo
Speech starts playing while it is generated: the audio streams into a gapless AudioWorklet player,
the panel beside the form (below it on a phone) shows how fast it came, and every take is kept
in the listening-QA workbench at the bottom of the page."""


def build_blocks(clips: UploadStore, *, sample_rate: int, prebuffer_ms: float, notice: str | None = None,
                 max_text_chars: int = 20000) -> gr.Blocks:
    # Clips uploaded or recorded through the page are copied into the engine's own store at once;
    # Gradio's files of them are swept hourly instead of piling up in its temp folder.
    with gr.Blocks(title="VoxCPM2 streaming demo", analytics_enabled=False, delete_cache=(3600, 3600)) as demo:
        gr.Markdown(INTRO)
        if notice:
            gr.HTML(f'<div class="vox-banner" role="alert">{notice}</div>', js_on_load=None, elem_id="vox-banner-box")
        with gr.Row(equal_height=False):
            with gr.Column(scale=3):
                form = _form(clips, max_text_chars)
            with gr.Column(scale=2, min_width=360):
                with gr.Row(elem_id="vox-actions"):  # beside the panel: the buttons and what they do stay in view
                    generate = gr.Button("Generate", variant="primary", elem_id="vox-generate")
                    stop = gr.Button("Stop", variant="stop", elem_id="vox-stop")
                gr.HTML(panel_html(sample_rate, prebuffer_ms), js_on_load=None, elem_id="vox-panel-box")
        gr.HTML(workbench_html(), js_on_load=None, elem_id="vox-workbench-box")
        gr.HTML(http_routes_html(), js_on_load=None, elem_id="vox-http-box")
        generate.click(None, inputs=[form[name] for name in FIELDS], outputs=None,
                       js=f"(...values) => window.voxcpm.generate({json.dumps(FIELDS)}, values)")
        stop.click(None, js="() => window.voxcpm.stop()")
    return demo


def _form(clips: UploadStore, max_text_chars: int) -> dict:
    form = {"mode": gr.Textbox("design", visible="hidden", elem_id="vox-mode")}
    form["text"] = gr.Textbox(label="Text to speak", lines=3, max_length=max_text_chars, elem_id="vox-text",
                              placeholder="What should be said?")
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


def _select_mode(tab: gr.Tab, mode: str, form: dict):
    # Tab clicks only set a hidden value in the page: no round trip to the server.
    tab.select(None, outputs=form["mode"], js=f"() => {json.dumps(mode)}")


def _design_tab(form: dict):
    with gr.Tab("Voice design", id="design", elem_id="vox-tab-design") as tab:
        form["description"] = gr.Textbox(label="Voice description", lines=2, elem_id="vox-description",
                                         placeholder="e.g. A warm, slightly husky female voice, speaking slowly")
        gr.Examples(design_examples(), [form["text"], form["description"]], label="Examples")
    _select_mode(tab, "design", form)


def _cloning_tab(form: dict, clips: UploadStore):
    with gr.Tab("Controllable cloning", id="cloning", elem_id="vox-tab-cloning") as tab:
        gr.HTML(VOICE_PICKER.format(mode="cloning"), elem_id="vox-cloning-voice")
        audio, form["clone_ref"] = _clip_input(clips, "clone")
        form["clone_audio"] = audio  # its file name goes into the take's settings
        form["clone_style"] = gr.Textbox(label="Style instruction (optional)", elem_id="vox-clone-style",
                                         placeholder="e.g. Whispering, a little out of breath")
        gr.Examples(cloning_examples(), [form["text"], audio, form["clone_style"]], label="Examples")
    _select_mode(tab, "cloning", form)


def _ultimate_tab(form: dict, clips: UploadStore):
    with gr.Tab("Ultimate cloning", id="ultimate", elem_id="vox-tab-ultimate") as tab:
        gr.Markdown("Continues straight on from the clip: give its exact transcript. No style instruction here.")
        gr.HTML(VOICE_PICKER.format(mode="ultimate"), elem_id="vox-ultimate-voice")
        audio, form["ultimate_ref"] = _clip_input(clips, "ultimate")
        form["ultimate_audio"] = audio
        form["ultimate_transcript"] = gr.Textbox(label="Exact transcript of the clip", lines=2,
                                                 elem_id="vox-ultimate-transcript")
        gr.Examples(ultimate_examples(), [form["text"], audio, form["ultimate_transcript"]], label="Examples")
    _select_mode(tab, "ultimate", form)


def _clip_input(clips: UploadStore, name: str) -> tuple[gr.Audio, gr.Textbox]:
    audio = gr.Audio(label="Reference clip (upload or record)", sources=["upload", "microphone"],
                     type="filepath", elem_id=f"vox-{name}-audio")
    clip_id = gr.Textbox(visible="hidden", elem_id=f"vox-{name}-ref")
    note = gr.Markdown(elem_id=f"vox-{name}-note")
    # Forget the old id in the page at once, so a quick Generate cannot use the previous clip; and
    # an error the panel shows about the clip is stale once a new one is given.
    audio.change(None, outputs=clip_id, js="() => { window.voxcpm && window.voxcpm.clipChanged(); return ''; }")

    def store(path: str | None, request: gr.Request) -> tuple[str, str]:
        address = request.client.host if request is not None and request.client else None
        return register_clip(clips, path, client=client_key(address))
    audio.change(store, audio, [clip_id, note], api_visibility="private", show_progress="minimal")
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


def _advanced() -> dict:
    with gr.Accordion("Advanced settings", open=False, elem_id="vox-advanced"):
        with gr.Row():
            cfg = gr.Slider(0.0, 10.0, value=2.0, step=0.1, label="CFG (guidance strength)", elem_id="vox-cfg")
            steps = gr.Slider(1, 50, value=10, step=1, label="Timesteps (diffusion steps per patch)",
                              elem_id="vox-steps")
        with gr.Row():
            random_seed = gr.Checkbox(True, label="Random seed", elem_id="vox-random-seed")
            seed = gr.Number(0, label="Seed (used when random is off)", precision=0, minimum=0,
                             elem_id="vox-seed")
            max_len = gr.Slider(1, 4096, value=4096, step=1, label="Maximum length (patches of 0.16 s)",
                                elem_id="vox-max-len")
        # Off by default: a clean clip needs nothing, and editing the user's audio should be asked for.
        trim = gr.Checkbox(False, label="Cloning: trim the silence at the clip's ends (voice activity detection)",
                           elem_id="vox-trim-silence")
    return {"cfg_value": cfg, "inference_timesteps": steps, "seed": seed, "random_seed": random_seed,
            "max_len": max_len, "trim_silence": trim}
