"""The one spec of the three modes and of every request setting: what each mode takes and refuses,
the defaults and the ranges. The engine's request checks, the HTTP and OpenAI bodies, the page's
sliders and help text (served to the browser as JSON, `spec_json()`) all read it from here.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from ..text.pauses import FORMS as PAUSE_FORMS, MAX_PAUSE_MS, MIN_PAUSE_MS

MAX_SEED = 2**63 - 1
MAX_PATCHES = 2**16  # about 2.9 hours of audio: far above any cache, so only nonsense is refused
PAGE_SEED_LIMIT = 2**31  # random seeds shown in the page must survive JavaScript's 53-bit numbers


@dataclass(frozen=True)
class Setting:
    """A numeric request setting. `page_high` is where the page's slider stops when the accepted
    range is far beyond any useful value (max_len: the official default, the model's own limit).
    `short` and `unit` are how a take's value reads in the workbench's lists ("speed 1.5×"); `audio`
    marks a setting applied to the audio made rather than read by the model; `page` one the page's
    form sets (the workbench records, compares and re-uses exactly those)."""
    name: str
    label: str
    low: float
    high: float
    default: float | None
    step: float
    integer: bool
    help: str
    page_high: float | None = None
    short: str = ""
    unit: str = ""
    audio: bool = False
    page: bool = True

    def check(self, value) -> str | None:
        """None when `value` is in range, else the sentence that says what is accepted."""
        if value is None and self.default is None:
            return None
        if self.low <= value <= self.high:
            return None
        kind, show = ("a whole number", lambda v: str(int(v))) if self.integer else ("a number", "{:g}".format)
        return f"{self.name} {value!r} is out of range: use {kind} from {show(self.low)} to {show(self.high)}"


SETTINGS = {s.name: s for s in (
    Setting("cfg_value", "CFG (guidance strength)", 0.0, 10.0, 2.0, 0.1, False,
            "How closely the voice follows the description, style or clip; 2 is the official default.",
            short="cfg"),
    Setting("inference_timesteps", "Timesteps (diffusion steps per patch)", 1, 100, 10, 1, True,
            "Euler steps of the diffusion head per 0.16 s patch: more is slower and a little cleaner.",
            short="timesteps"),
    Setting("min_len", "Minimum length (patches)", 0, MAX_PATCHES, 2, 1, True,
            "Patches before the stop head may end the utterance (API only, not on the page).",
            short="min length", page=False),
    Setting("max_len", "Maximum length (patches of 0.16 s)", 1, MAX_PATCHES, 4096, 1, True,
            "Generation stops here at the latest; the model's own cap (6 patches per text token + 10) "
            "usually stops it sooner.", page_high=4096, short="max length"),
    Setting("speed", "Speed", 0.25, 4.0, 1.0, 0.05, False,
            "Playback speed, pitch kept (time-stretched as it streams, as OpenAI's `speed`); 1 is the "
            "model's own pace, untouched. Not a model setting: applied to the audio it makes.",
            short="speed", unit="×", audio=True),
    Setting("seed", "Seed (used when random is off)", 0, MAX_SEED, None, 1, True,
            "The same seed and settings give the same audio on every device; none draws one at random.",
            short="seed"),
)}


# The settings a body takes as numbers, each with its range and default above (the seed is drawn
# by the route when absent, so it is a body's own field).
TUNING = tuple(name for name in SETTINGS if name != "seed")


def field_type(name: str) -> type:
    return int if SETTINGS[name].integer else float


@dataclass(frozen=True)
class Mode:
    """What a mode reads. `control` names the free-text field it uses (None: refused), `clip` and
    `transcript` whether it needs a reference clip and its exact transcript."""
    name: str
    title: str
    control: str | None
    clip: bool
    transcript: bool
    help: str


MODES = {m.name: m for m in (
    Mode("design", "Voice design", "voice description", clip=False, transcript=False,
         help="A description of the voice, no audio: the model reads '(description)text'."),
    Mode("cloning", "Controllable cloning", "style instruction", clip=True, transcript=False,
         help="A reference clip as a prefix, and an optional style instruction."),
    Mode("ultimate", "Ultimate cloning", None, clip=True, transcript=True,
         help="A clip and its exact transcript, continued seamlessly. No style instruction: "
              "the model would read it aloud."),
)}
DEFAULT_MODE = "design"
# What a streaming route's `timestamps` takes: no words (the default: nothing is aligned), or every
# word of the text timed on the audio sent (ui/services/words.py).
TIMESTAMPS = ("none", "word")


def default(name: str):
    return SETTINGS[name].default


def spec_json() -> dict:
    """What the page reads: the modes and every setting with its range, default and help, and the
    pause tags a text may hold (their bounds live with their parser, below this layer)."""
    return {"modes": {k: asdict(m) for k, m in MODES.items()},
            "settings": {k: asdict(s) for k, s in SETTINGS.items()},
            "default_mode": DEFAULT_MODE, "page_seed_limit": PAGE_SEED_LIMIT, "timestamps": list(TIMESTAMPS),
            "pauses": {"min_ms": MIN_PAUSE_MS, "max_ms": MAX_PAUSE_MS, "forms": list(PAUSE_FORMS)}}
