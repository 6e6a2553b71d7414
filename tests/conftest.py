"""Session set-up shared by every test module."""
import os
import tempfile
from pathlib import Path

import httpx
import pytest

FIGURES = Path(__file__).resolve().parent / "artifacts" / "robust-figures.txt"


def pytest_sessionstart(session):
    # The robustness tests append what they measured; each run starts a fresh list.
    FIGURES.unlink(missing_ok=True)
    # Apps started by the tests (in process or as app.py subprocesses) keep their voice library in
    # a throwaway folder, never in the user's real one.
    if "VOXCPM_DATA_DIR" not in os.environ:
        os.environ["VOXCPM_DATA_DIR"] = tempfile.mkdtemp(prefix="voxcpm-test-data-")


@pytest.fixture()
def client(app):
    """An HTTP client of the module's served app (each module's `app` fixture)."""
    with httpx.Client(base_url=app.url, timeout=120) as c:
        yield c
