"""The web app around the inference engine: Gradio page, PCM streaming routes, player assets."""
from .context import AppContext
from .settings import Settings


def create_app(engine, settings: Settings | None = None):
    """ui/server.create_app; imported only when called, since it loads Gradio (seconds), which
    app.py's command line and start-up checks do without."""
    from .server import create_app as build

    return build(engine, settings)


__all__ = ["AppContext", "Settings", "create_app"]
