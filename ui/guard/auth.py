"""An optional access token for a server bound beyond this machine.

With a token set, every request (the Gradio page, its assets and API, the PCM routes) must carry it:
as the header `X-VoxCPM-Token: <token>`, as `Authorization: Bearer <token>`, or as the cookie that
opening `/?token=<token>` once sets (the page is then redirected to a URL without the token, so it
stays out of the history and of Referer headers). Only /voxcpm/health and /ready stay open, for probes.

A plain ASGI middleware rather than Starlette's BaseHTTPMiddleware, which would buffer the PCM
stream and hide disconnects from the routes.
"""
from __future__ import annotations

import hmac
import json
import re
from http.cookies import SimpleCookie
from urllib.parse import parse_qsl, quote, urlencode

from .answers import error_body, is_openai_path

COOKIE = "voxcpm_token"
HEADER = "x-voxcpm-token"
OPEN_PATHS = ("/voxcpm/health", "/ready")  # probes; /metrics needs the token
COOKIE_DAYS = 30
TOKEN_PATTERN = r"[A-Za-z0-9._~-]{8,256}"

REFUSED = "this server needs an access token: open the link with ?token=… you were given, or send the X-VoxCPM-Token header"
# OpenAI's clients send their key as Authorization: Bearer, which the gate reads: the token goes there.
REFUSED_OPENAI = ("this server needs an access token: give it as your client's API key (sent as "
                  "Authorization: Bearer <token>)")
WRONG = "the access token sent is not this server's: check it against the one you were given"
PAGE = """<!doctype html><meta charset="utf-8"><title>Access token needed</title>
<body style="font-family: sans-serif; max-width: 40em; margin: 4em auto">
<h1>Access token needed</h1><p>This VoxCPM2 demo is private. Open the link you were given
(it ends in <code>?token=…</code>); the browser then remembers it.</p></body>"""


class TokenGate:
    def __init__(self, app, token: str):
        if not re.fullmatch(TOKEN_PATTERN, token or ""):
            raise ValueError("a token needs 8 to 256 characters from A-Z a-z 0-9 . _ ~ - (it goes in URLs and cookies)")
        self.app = app
        self._token = token.encode()

    async def __call__(self, scope, receive, send):
        if scope["type"] not in ("http", "websocket") or scope["path"] in OPEN_PATHS:
            return await self.app(scope, receive, send)
        sent = self._sent(scope)
        if any(self._matches(c) for c in sent):
            return await self.app(scope, receive, send)
        query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
        if scope["type"] == "http" and self._matches(query.get("token", "")):
            return await self._login(scope, query, send)
        if scope["type"] == "websocket":  # a browser cannot set a socket's headers: ?token= is how it sends one
            if self._matches(query.get("token", "")):
                return await self.app(scope, receive, send)
            return await send({"type": "websocket.close", "code": 1008})
        await self._refuse(scope, send, wrong=bool(sent))

    def _matches(self, candidate: str) -> bool:
        return hmac.compare_digest(candidate.encode(), self._token)

    def _sent(self, scope) -> list[str]:
        """The tokens the request carries (header, bearer, cookie), right or wrong."""
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        bearer = headers.get("authorization", "")
        candidates = [headers.get(HEADER, ""), bearer[7:] if bearer.lower().startswith("bearer ") else ""]
        cookie = SimpleCookie()
        try:
            cookie.load(headers.get("cookie", ""))
        except Exception:  # a malformed cookie header only means no token
            pass
        if COOKIE in cookie:
            candidates.append(cookie[COOKIE].value)
        return [c for c in candidates if c]

    async def _login(self, scope, query: dict, send):
        """Set the cookie and send the browser to the same URL without the token."""
        rest = urlencode({k: v for k, v in query.items() if k != "token"})
        location = _own_path(scope) + (f"?{rest}" if rest else "")
        secure = "; Secure" if scope.get("scheme") == "https" else ""
        cookie = (f"{COOKIE}={self._token.decode()}; Path=/; Max-Age={COOKIE_DAYS * 86400}; HttpOnly; "
                  f"SameSite=Strict{secure}")
        headers = [(b"location", location.encode()), (b"set-cookie", cookie.encode()),
                   (b"cache-control", b"no-store"), (b"content-length", b"0")]
        await send({"type": "http.response.start", "status": 303, "headers": headers})
        await send({"type": "http.response.body", "body": b""})

    async def _refuse(self, scope, send, wrong: bool):
        accept = dict(scope.get("headers", [])).get(b"accept", b"").decode("latin-1")
        wants_page = scope.get("method") == "GET" and "text/html" in accept
        message = WRONG if wrong else REFUSED_OPENAI if is_openai_path(scope["path"]) else REFUSED
        error = error_body(scope["path"], 401, message, code="invalid_api_key")
        body = PAGE.encode() if wants_page else json.dumps(error).encode()
        kind = b"text/html; charset=utf-8" if wants_page else b"application/json"
        headers = [(b"content-type", kind), (b"content-length", str(len(body)).encode()),
                   (b"www-authenticate", b'Bearer realm="voxcpm"'), (b"cache-control", b"no-store")]
        await send({"type": "http.response.start", "status": 401, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def _own_path(scope) -> str:
    """The request's path as a redirect target that stays on this site. A path that starts with
    // or /\\ is read by browsers as another host (//evil.example/), so leading slashes collapse to
    one; the path is percent-encoded so that a decoded CR/LF or space cannot reach the header."""
    path = "/" + (scope.get("root_path", "") + scope["path"]).lstrip("/\\")
    return quote(path, safe="/:@!$&'()*+,;=-._~")
