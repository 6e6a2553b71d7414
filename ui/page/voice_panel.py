"""Markup of the voice library: save the current clip or the last take under a name, and the list
of saved voices (play, rename, delete). static/voices/voices.js fills it in and drives it; the cloning
tabs get a saved-voice picker from the same script (VOICE_PICKER)."""
from __future__ import annotations

VOICE_PICKER = '<div class="vox-voice-pick" data-mode="{mode}"></div>'


def voice_panel_html() -> str:
    return """
<div id="vox-voices">
  <div class="vox-voices-save">
    <input type="text" class="vox-voice-name" maxlength="64" placeholder="Name for a new voice, e.g. Anna" aria-label="Voice name">
    <button type="button" class="vox-save-clip" title="The clip of the cloning tab in use, with the transcript typed there (ultimate cloning)">Save the current clip</button>
    <button type="button" class="vox-save-take" title="The last generated audio, with its text as the transcript: keeps a designed voice">Save the last take</button>
  </div>
  <div class="vox-voices-status" role="status" aria-live="polite"></div>
  <ul class="vox-voices-list"></ul>
  <div class="vox-voices-api">From scripts and OpenAI clients: <code>POST /v1/audio/speech</code> with
    <code>voice</code> set to a saved voice's name, or <code>"design"</code> with <code>instructions</code>
    (base URL <code>/v1</code>, model <code>voxcpm2</code>; see docs/api.md).</div>
</div>"""
