"""The web app around the inference engine: Gradio page, PCM streaming routes, player assets."""
from .context import AppContext, AppSettings


def create_app(engine, settings: AppSettings | None = None):
    """ui/server.create_app; imported only when called, since it loads Gradio (seconds), which
    app.py's command line and start-up checks do without."""
    from .server import create_app as build

    return build(engine, settings)


__all__ = ["AppContext", "AppSettings", "create_app"]
