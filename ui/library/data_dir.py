"""Where the app keeps what outlives a restart (the voice library): the first of

1. `--data-dir`, else `$VOXCPM_DATA_DIR`;
2. `/data` when it exists and is writable: a Hugging Face Space's persistent storage (without it a
   Space's disk is wiped at every restart, so nothing there would last anyway);
3. the user's data folder: `$XDG_DATA_HOME/voxcpm2-demo` (usually ~/.local/share/voxcpm2-demo),
   `%LOCALAPPDATA%\\voxcpm2-demo` on Windows, ~/Library/Application Support/voxcpm2-demo on macOS.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

APP_FOLDER = "voxcpm2-demo"
SPACE_STORAGE = Path("/data")


def resolve_data_dir(given: str | None) -> tuple[Path, str]:
    """(folder, why it was chosen), for the start-up log."""
    if given:
        return Path(given).expanduser(), "--data-dir"
    if os.environ.get("VOXCPM_DATA_DIR"):
        return Path(os.environ["VOXCPM_DATA_DIR"]).expanduser(), "$VOXCPM_DATA_DIR"
    if SPACE_STORAGE.is_dir() and os.access(SPACE_STORAGE, os.W_OK):
        return SPACE_STORAGE / APP_FOLDER, "persistent storage (/data)"
    return user_data_root() / APP_FOLDER, "the user's data folder"


def user_data_root() -> Path:
    if sys.platform == "win32" and os.environ.get("LOCALAPPDATA"):
        return Path(os.environ["LOCALAPPDATA"])
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Application Support"
    return Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
