"""The page and its one spec, and the browser side's one contract with Gradio, checked without a
browser: the sliders, seed box and tabs Gradio is told to draw carry the ranges, defaults, labels
and help of inference/request/modes.py; the form names each mode's inputs as the page's request
builder finds them; and in static/ only the adapter (static/page/gradio.js) knows Gradio's markup,
no module sets a window global, and none is imported for its side effects."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from inference.request import modes
from ui.library.uploads import UploadStore
from ui.page.layout import ADAPTER, FIELDS, FILLED, build_blocks
from ui.settings import DEFAULTS

ROOT = Path(__file__).resolve().parents[2]
STATIC = ROOT / "static"
ADAPTER_FILE = STATIC / "page" / "gradio.js"
SLIDERS = {"cfg_value": "vox-cfg", "inference_timesteps": "vox-steps", "max_len": "vox-max-len", "speed": "vox-speed"}


@pytest.fixture(scope="module")
def components() -> dict[str, dict]:
    """Gradio's config of the built page: each component with an elem_id, by that id."""
    demo = build_blocks(UploadStore.of(DEFAULTS, 16000), sample_rate=48000, prebuffer_ms=80,
                        max_text_chars=DEFAULTS.limits.max_text_chars)
    config = demo.get_config_file()
    return {c["props"]["elem_id"]: c for c in config["components"] if c.get("props", {}).get("elem_id")}


@pytest.mark.parametrize("name", sorted(SLIDERS))
def test_each_slider_is_the_specs_setting(components, name):
    setting = modes.SETTINGS[name]
    slider = components[SLIDERS[name]]
    props = slider["props"]
    high = setting.page_high if setting.page_high is not None else setting.high
    assert slider["type"] == "slider"
    assert (props["minimum"], props["maximum"], props["step"], props["value"]) == (
        setting.low, high, setting.step, setting.default)
    assert (props["label"], props["info"]) == (setting.label, setting.help)


def test_timesteps_reach_the_specs_hundred_and_max_len_stops_at_its_page_high(components):
    assert components["vox-steps"]["props"]["maximum"] == modes.SETTINGS["inference_timesteps"].high == 100
    assert components["vox-max-len"]["props"]["maximum"] == modes.SETTINGS["max_len"].page_high


def test_the_seed_box_stays_within_what_javascript_holds_exactly(components):
    setting = modes.SETTINGS["seed"]
    props = components["vox-seed"]["props"]
    assert (props["minimum"], props["maximum"], props["precision"]) == (setting.low, modes.PAGE_SEED_LIMIT - 1, 0)
    assert (props["label"], props["info"]) == (setting.label, setting.help)
    assert modes.PAGE_SEED_LIMIT <= 2**53


def test_each_tab_is_titled_as_its_mode(components):
    for name, mode in modes.MODES.items():
        assert components[f"vox-tab-{name}"]["props"]["label"] == mode.title
    assert components["vox-mode"]["props"]["value"] == modes.DEFAULT_MODE


def test_the_form_names_each_modes_inputs_as_the_request_builder_reads_them():
    # static/player/server.js reads <mode>_control, <mode>_ref and <mode>_transcript where the spec
    # says the mode reads them; the workbench's Re-use settings fills the same names (FILLED).
    for name, mode in modes.MODES.items():
        wanted = {"control": bool(mode.control), "ref": mode.clip, "audio": mode.clip, "transcript": mode.transcript}
        for part, used in wanted.items():
            assert (f"{name}_{part}" in FIELDS) == used, (name, part)
    assert all(f"{name}_audio" not in FILLED for name in modes.MODES)
    assert set(SLIDERS) | {"seed"} <= set(FIELDS) & set(modes.SETTINGS)


def test_the_form_sets_exactly_the_settings_the_spec_marks_for_the_page():
    # The workbench records, compares, exports and re-uses the spec's `page` settings by their
    # names (static/workbench/takes.js `tuned`): each must be a field of the form, and no other.
    on_page = {name for name, s in modes.SETTINGS.items() if s.page}
    assert on_page == set(FIELDS) & set(modes.SETTINGS) and "min_len" not in on_page


def page_scripts() -> list[Path]:
    return sorted(p for p in STATIC.rglob("*.js") if "vendor" not in p.relative_to(STATIC).parts)


def test_the_hooks_import_the_adapter_where_the_page_script_finds_it():
    from ui.server import _head

    entry = re.search(r'src="([^"?]+)', _head()).group(1)
    assert Path(entry).parent.as_posix() == "voxcpm/static" and (STATIC / Path(entry).name).is_file()
    assert ADAPTER == "voxcpm/static/page/gradio.js" and ADAPTER_FILE.is_file()


# What only the adapter may say: Gradio's elem_ids (any of the page's), and how Gradio draws things.
GRADIO_MARKUP = ["textarea", "data-testid", "role=\"tab\"", "[role=", "input[type="]


def test_only_the_adapter_knows_gradios_markup(components):
    elem_ids = sorted(components)
    assert "vox-generate" in elem_ids and "vox-clone-ref" in elem_ids
    found = []
    for path in page_scripts():
        if path == ADAPTER_FILE:
            continue
        text = path.read_text(encoding="utf-8")
        found += [f"{path.relative_to(ROOT)}: {word}" for word in GRADIO_MARKUP + elem_ids
                  if re.search(rf"{re.escape(word)}(?![\w-])", text)]
    assert found == []


def test_no_module_sets_a_window_global_or_is_imported_for_its_side_effects():
    found = []
    for path in page_scripts():
        text = path.read_text(encoding="utf-8")
        for pattern in (r"\bwindow\.\w+\s*=[^=]", r"\bglobalThis\b", r"^\s*import\s+['\"]", r"\bwindow\.voxcpm"):
            found += [f"{path.relative_to(ROOT)}: {m.group(0).strip()}" for m in re.finditer(pattern, text, re.M)]
    assert found == []
