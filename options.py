"""app.py's command line: every option with its default in its help, and argparse's errors in the
two-line shape of every other start-up error (startup.py checks the values)."""
from __future__ import annotations

import argparse

from ui.settings import DEFAULTS as SETTINGS  # the defaults: every number below is read from them

LIMITS = SETTINGS.limits
EXIT_CODE = 2  # as argparse uses for a bad command line
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


class ArgumentParser(argparse.ArgumentParser):
    def error(self, message):
        # Two lines like every other start-up error, instead of argparse's eight-line usage block.
        self.exit(EXIT_CODE, f"{self.prog}: error: {message}.\n"
                             f"To fix: python {self.prog} --help lists the options and their defaults.\n")


def build_parser() -> argparse.ArgumentParser:
    # Each help ends with its default, so --help alone tells what a bare `python app.py` does.
    p = ArgumentParser(description="VoxCPM2 streaming text-to-speech demo")
    _model_options(p)
    _network_options(p)
    _limit_options(p)
    _library_options(p)
    p.add_argument("--prebuffer-ms", type=float, default=SETTINGS.page.prebuffer_ms,
                   help="audio the player holds before it starts (default: %(default)s)")
    p.add_argument("--log-level", default="INFO", type=str.upper, choices=LOG_LEVELS,
                   help="DEBUG also logs the traceback of a failed start (default: %(default)s)")
    return p


def _model_options(p: argparse.ArgumentParser):
    p.add_argument("--model", default="openbmb/VoxCPM2",
                   help="hub id (downloaded into the Hugging Face cache) or local checkpoint folder "
                        "(default: %(default)s)")
    p.add_argument("--lora", default=None,
                   help="LoRA weights saved by the official VoxCPM fine-tuning: a folder holding "
                        "lora_weights.safetensors and lora_config.json, or a hub id; merged into the model's "
                        "weights at load (default: none)")
    p.add_argument("--random-weights", action="store_true",
                   help="a tiny random model instead, no download; the output is noise (default: off)")
    p.add_argument("--device", default=None, help="cuda, cuda:N or cpu (default: cuda when available, else cpu)")
    p.add_argument("--gpus", type=int, default=None,
                   help="serve from GPUs cuda:0 to cuda:N-1, one engine each; a request goes to the GPU with the "
                        "most free streams (default: every visible GPU when the device is cuda; one engine on cpu "
                        "or on --device cuda:N)")
    p.add_argument("--dtype", default=None, help="bfloat16 or float32; float16 is refused (untested on this model) "
                                                 "(default: bfloat16 on cuda, float32 on cpu)")
    p.add_argument("--asr-model", default="openai/whisper-large-v3-turbo",
                   help="speech recognition model that fills in a clip's transcript for ultimate cloning, loaded on "
                        "first use: hub id or local folder (transformers' or CTranslate2's, as faster-whisper keeps them: "
                        "converted once into DATA_DIR/models), or none to switch it off (default: %(default)s)")
    p.add_argument("--speaker-model", default="microsoft/wavlm-base-plus-sv",
                   help="speaker verification model (a WavLM x-vector checkpoint) for the listening-QA workbench's "
                        "speaker similarity, loaded on first use: hub id or local folder, or none to switch it off "
                        "(default: %(default)s)")


def _network_options(p: argparse.ArgumentParser):
    p.add_argument("--host", default=None,
                   help="address to listen on (default: $GRADIO_SERVER_NAME, else 0.0.0.0 on a Hugging Face "
                        "Space, else 127.0.0.1)")
    p.add_argument("--port", type=int, default=None, help="(default: $GRADIO_SERVER_PORT, else 7860)")
    p.add_argument("--allowed-hosts", default="",
                   help="comma-separated host names to answer to besides the loopback ones (a name that points "
                        "at this machine); requests naming any other host are refused (default: none)")
    p.add_argument("--token", default=None,
                   help="require this access token; open /?token=... once in the browser. Needed to listen "
                        "beyond this machine (a --host other than loopback) unless --open; an empty one is "
                        "refused (default: $VOXCPM_TOKEN, else none)")
    p.add_argument("--open", action="store_true",
                   help="serve others without a token on purpose, e.g. behind a proxy that authenticates; "
                        "the voice library is then read-only (default: on when $VOXCPM_OPEN is 1 or on a "
                        "Hugging Face Space, else off)")
    p.add_argument("--loop", default=SETTINGS.http.loop, choices=SETTINGS.http.LOOPS,
                   help="the event loop that serves every request, as uvicorn's --loop: auto takes uvloop when "
                        "installed (default: %(default)s)")
    p.add_argument("--http", default=SETTINGS.http.parser, choices=SETTINGS.http.PARSERS,
                   help="the HTTP parser, as uvicorn's --http: auto takes httptools when installed "
                        "(default: %(default)s)")


def _limit_options(p: argparse.ArgumentParser):
    p.add_argument("--max-streams", type=int, default=LIMITS.max_streams,
                   help="most streams generated at once, one batch row each; fewer if GPU memory holds "
                        "fewer (default: %(default)s)")
    p.add_argument("--max-queue", type=int, default=LIMITS.max_queue,
                   help="requests allowed to wait for a free stream (default: %(default)s)")
    p.add_argument("--prepare-threads", type=int, default=LIMITS.prepare_threads,
                   help="requests prepared at once (text, tokens, clips) on each GPU's intake threads "
                        "(default: %(default)s)")
    p.add_argument("--normalize-processes", type=int, default=LIMITS.normalize_processes,
                   help="processes beside the app that normalize texts sent with normalize on: WeText's grammars "
                        "would hold up the streams on a thread; 0 normalizes on the intake threads "
                        "(default: %(default)s)")
    p.add_argument("--max-text-chars", type=int, default=LIMITS.max_text_chars,
                   help="longest text, description or transcript (default: %(default)s)")
    p.add_argument("--max-audio-seconds", type=float, default=LIMITS.max_audio_seconds,
                   help="longest reference clip (default: %(default)s)")
    p.add_argument("--max-output-seconds", type=float, default=LIMITS.max_output_seconds,
                   help="most audio one request may produce, speech and pauses as heard: a text whose "
                        "pauses alone pass it is refused, the rest is cut there (default: %(default)s)")
    p.add_argument("--max-upload-mb", type=int, default=SETTINGS.http.max_upload_mb, help="largest uploaded file (default: %(default)s)")
    p.add_argument("--upload-ttl-min", type=float, default=SETTINGS.clips.upload_ttl_s / 60,
                   help="minutes an uploaded clip is kept (default: %(default)s)")


def _library_options(p: argparse.ArgumentParser):
    p.add_argument("--data-dir", default=None,
                   help="folder for the voice library (default: $VOXCPM_DATA_DIR, else a Space's persistent /data, "
                        "else the user's data folder, e.g. ~/.local/share/voxcpm2-demo)")
    p.add_argument("--voice-store", default=None,
                   help="keep the voice library in PostgreSQL instead, one library for every replica: "
                        "postgresql://user[:password]@host[:port]/database (default: $VOXCPM_VOICE_STORE, else "
                        "the folder DATA_DIR/voices)")
    p.add_argument("--max-voices", type=int, default=SETTINGS.library.max_voices, help="most voices the library holds (default: %(default)s)")
    p.add_argument("--max-library-mb", type=int, default=SETTINGS.library.max_library_mb,
                   help="most disk space the library may use (default: %(default)s)")
