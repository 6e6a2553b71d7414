"""The web app around the inference engine: Gradio page, PCM streaming routes, player assets."""
from .server import AppSettings, create_app

__all__ = ["AppSettings", "create_app"]
