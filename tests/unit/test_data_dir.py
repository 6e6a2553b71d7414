"""Where the voice library lives: --data-dir, then $VOXCPM_DATA_DIR, then a Space's /data, then the
user's data folder."""
from pathlib import Path

from ui.library import data_dir


def test_flag_wins_over_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("VOXCPM_DATA_DIR", str(tmp_path / "env"))
    assert data_dir.resolve_data_dir(str(tmp_path / "flag")) == (tmp_path / "flag", "--data-dir")


def test_environment_then_space_storage_then_user_folder(monkeypatch, tmp_path):
    monkeypatch.setenv("VOXCPM_DATA_DIR", str(tmp_path / "env"))
    assert data_dir.resolve_data_dir(None)[0] == tmp_path / "env"
    monkeypatch.delenv("VOXCPM_DATA_DIR")
    space = tmp_path / "space"
    space.mkdir()
    monkeypatch.setattr(data_dir, "SPACE_STORAGE", space)
    assert data_dir.resolve_data_dir(None)[0] == space / data_dir.APP_FOLDER
    monkeypatch.setattr(data_dir, "SPACE_STORAGE", tmp_path / "absent")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    monkeypatch.setattr(data_dir.sys, "platform", "linux")
    assert data_dir.resolve_data_dir(None) == (tmp_path / "xdg" / data_dir.APP_FOLDER, "the user's data folder")
    assert isinstance(data_dir.user_data_root(), Path)
