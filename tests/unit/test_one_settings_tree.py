"""One settings tree (issue 44, item 3; ui/settings.py and inference/config.py): every limit, rate
and default the server keeps is written once. Each field lives in one section, a field is named
alone to change it, and no product file but the tree's own writes a limit's value again: the
engine, the routes and the page read it (the page through GET /voxcpm/spec)."""
from __future__ import annotations

import ast
import dataclasses
import io
import re
import tokenize
from pathlib import Path

import pytest

from inference.config import LIMITS
from ui.settings import DEFAULTS, Settings

ROOT = Path(__file__).resolve().parents[2]
TREE = {ROOT / "ui" / "settings.py", ROOT / "inference" / "config.py"}
# Values too common to mean one limit when written elsewhere: small counts, powers of two, the
# seconds of a minute and HTTP statuses. A limit of one of these values is still written only in
# the tree; the check below cannot tell its literal from the others'.
COMMON = {0, 1, 2, 3, 4, 5, 8, 10, 12, 16, 30, 32, 40, 60, 64, 100, 128, 200, 256, 500, 512, 1024, 0.1, 0.5}
# The same value with another meaning, where the check would otherwise stop.
ELSEWHERE = {
    ("limits.max_text_chars", "inference/model/config.py"): "20000 Hz, the VAE's first sample-rate bin",
    ("limits.max_text_chars", "inference/model/tiny_checkpoint.py"): "20000 Hz, the same bins in the tiny config",
    ("http.max_upload_mb", "static/workbench/axis.js"): "25 patches between two timeline labels",
}


def leaves(obj, path: str = ""):
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if dataclasses.is_dataclass(value):
            yield from leaves(value, f"{path}{f.name}.")
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            yield f"{path}{f.name}", value


def numbers_in(path: Path) -> set:
    """The numeric literals of a Python file (its tokens) or of a script (outside strings and comments)."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".py":
        found = set()
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type == tokenize.NUMBER:
                found.add(ast.literal_eval(token.string))
        return found
    text = re.sub(r"/\*.*?\*/|//[^\n]*", "", text, flags=re.S)
    text = re.sub(r"'(?:\\.|[^'\\\n])*'|\"(?:\\.|[^\"\\\n])*\"|`(?:\\.|[^`\\])*`", "''", text)
    return {float(n) for n in re.findall(r"(?<![\w.])\d+(?:\.\d+)?(?![\w.])", text)}


def product_files() -> list[Path]:
    files = [p for top in ("inference", "ui") for p in (ROOT / top).rglob("*.py")]
    files += [ROOT / name for name in ("app.py", "options.py", "startup.py")]
    files += [p for p in (ROOT / "static").rglob("*.js") if "vendor" not in p.parts]
    return [p for p in files if p not in TREE]


def test_no_product_file_but_the_tree_writes_a_limits_value():
    numbers = {p: numbers_in(p) for p in product_files()}
    written = {}
    for name, value in leaves(DEFAULTS):
        if value in COMMON:
            continue
        where = [str(p.relative_to(ROOT)) for p, found in numbers.items() if value in found]
        where = [w for w in where if (name, w) not in ELSEWHERE]
        if where:
            written[f"{name} = {value}"] = where
    assert written == {}, f"written again outside the settings tree: {written}"


def test_the_check_finds_a_limit_written_twice(tmp_path):
    copy = tmp_path / "route.py"
    copy.write_text(f"MAX_TEXT_CHARS = {LIMITS.max_text_chars}\nTIMEOUT = 1_800.0\n")
    assert {LIMITS.max_text_chars, DEFAULTS.clips.upload_ttl_s} <= numbers_in(copy)
    page = tmp_path / "take.js"
    page.write_text("// 600 in a comment\nexport const MAX = 600; const s = '240';\n")
    assert numbers_in(page) == {600.0}


def test_each_field_lives_in_one_section_and_is_changed_by_its_name():
    settings = Settings.of(prebuffer_ms=40.0, max_queue=2, token="t0ken-here", recognizer=None)
    assert settings.page.prebuffer_ms == 40.0 and settings.limits.max_queue == 2
    assert settings.access.token == "t0ken-here" and settings.analysis.recognizer is None
    assert settings.limits.max_streams == DEFAULTS.limits.max_streams, "the rest are the defaults"
    with pytest.raises(TypeError, match="no setting is named 'prebuffer'"):
        Settings.of(prebuffer=40)
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.page.prebuffer_ms = 1.0  # frozen: chosen at start-up, never changed after
