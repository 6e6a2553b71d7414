"""Session set-up shared by every test module."""
from pathlib import Path

FIGURES = Path(__file__).resolve().parent / "artifacts" / "robust-figures.txt"


def pytest_sessionstart(session):
    # The robustness tests append what they measured; each run starts a fresh list.
    FIGURES.unlink(missing_ok=True)
