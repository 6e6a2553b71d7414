// The voice library in the page (ui/page/voice_panel.py): lists the saved voices, plays, renames and
// deletes them, saves the current clip or the last take, and fills the saved-voice picker of each
// cloning tab. static/app.js asks picked(mode) which voice a request should use.

import { errorText } from './http.js';
import { wavBlob } from './pcm.js';

const API = new URL('../', import.meta.url); // .../voxcpm/

class VoiceLibraryUI {
  constructor() {
    this.voices = [];
    this.writable = false;
    this.available = true;
    this.picks = { cloning: '', ultimate: '' }; // the picker's choice per tab, kept across re-renders
    // Until every part is on the page; then the observer goes, so the player's panel updates cost nothing here.
    this.observer = new MutationObserver(() => this.mount());
    this.observer.observe(document.body, { childList: true, subtree: true });
    this.mount();
    this.refresh();
  }

  picked(mode) {
    const name = this.picks[mode] || '';
    return this.voices.some((v) => v.name === name) ? name : '';
  }

  // Gradio renders blocks when it likes: wire each part the first time it appears.
  mount() {
    const root = document.getElementById('vox-voices');
    if (root && !root.dataset.wired) {
      root.dataset.wired = '1';
      root.querySelector('.vox-save-clip').addEventListener('click', () => this.saveClip());
      root.querySelector('.vox-save-take').addEventListener('click', () => this.saveTake());
      root.querySelector('.vox-voices-list').addEventListener('click', (event) => this.onListClick(event));
      this.render();
    }
    document.querySelectorAll('.vox-voice-pick:not([data-wired])').forEach((box) => {
      box.dataset.wired = '1';
      box.innerHTML = '<label>Saved voice <select class="vox-voice-select"></select></label>';
      box.querySelector('select').addEventListener('change', (event) => { this.picks[box.dataset.mode] = event.target.value; });
      this.fillPicker(box);
    });
    const wired = document.querySelectorAll('#vox-voices[data-wired], .vox-voice-pick[data-wired]').length;
    if (wired === 3) this.observer.disconnect();
  }

  async refresh() {
    const response = await fetch(new URL('voices', API), { cache: 'no-store' }).catch(() => null);
    if (!response || !response.ok) {
      this.available = false;
      this.voices = [];
    } else {
      const data = await response.json();
      Object.assign(this, { available: true, voices: data.voices, writable: data.writable });
    }
    this.render();
  }

  render() {
    document.querySelectorAll('.vox-voice-pick[data-wired]').forEach((box) => this.fillPicker(box));
    const root = document.getElementById('vox-voices');
    if (!root) return;
    root.querySelectorAll('button.vox-save-clip, button.vox-save-take, .vox-voice-name').forEach((el) => {
      el.disabled = !this.available || !this.writable;
    });
    if (!this.available) this.status('This server keeps no voice library.');
    else if (!this.writable) this.status('The library is read-only here: the server needs a token to allow changes.');
    const list = root.querySelector('.vox-voices-list');
    list.replaceChildren(...this.voices.map((voice) => this.row(voice)));
  }

  row(voice) {
    const li = document.createElement('li');
    li.className = 'vox-voice';
    li.dataset.name = voice.name;
    const title = document.createElement('span');
    title.className = 'vox-voice-title';
    title.textContent = `${voice.name} (${voice.seconds.toFixed(1)} s${voice.transcript ? ', with transcript' : ''})`;
    const audio = document.createElement('audio');
    audio.controls = true;
    audio.preload = 'none';
    audio.src = new URL(`voices/${encodeURIComponent(voice.name)}/audio`, API);
    li.append(title, audio);
    if (this.writable) {
      for (const [action, label] of [['rename', 'Rename'], ['delete', 'Delete']]) {
        const button = document.createElement('button');
        Object.assign(button, { type: 'button', textContent: label });
        button.dataset.action = action;
        li.append(button);
      }
    }
    return li;
  }

  fillPicker(box) {
    const select = box.querySelector('select');
    const options = [['', '— the clip below —'], ...this.voices.map((v) => [v.name, v.name])];
    select.replaceChildren(...options.map(([value, label]) => new Option(label, value)));
    select.value = this.picked(box.dataset.mode);
    box.hidden = !this.voices.length;
  }

  status(message, kind = 'info') {
    const el = document.querySelector('#vox-voices .vox-voices-status');
    if (el) Object.assign(el, { textContent: message }).dataset.kind = kind;
  }

  newName() {
    return document.querySelector('#vox-voices .vox-voice-name').value.trim();
  }

  // The clip of the cloning tab in use (its server-side id) and, in ultimate cloning, its transcript.
  async saveClip() {
    const mode = fieldValue('vox-mode');
    const tab = mode === 'ultimate' ? 'ultimate' : 'clone';
    const clipId = fieldValue(`vox-${tab}-ref`);
    if (mode === 'design' || !clipId) return this.status('Upload or record a clip in a cloning tab first.', 'error');
    const transcript = mode === 'ultimate' ? fieldValue('vox-ultimate-transcript') : null;
    await this.save({ name: this.newName(), clip_id: clipId, transcript: transcript || null });
  }

  // The last take, as the WAV the player offers, with its text as the transcript.
  async saveTake() {
    const run = window.voxcpm && window.voxcpm.run;
    if (!run || !run.samples || !['finished', 'received', 'stopped'].includes(run.state)) {
      return this.status('Generate something first: the last take is saved once it has arrived.', 'error');
    }
    this.status('Uploading the take…');
    const upload = await fetch(new URL('upload', API), { method: 'POST', body: wavBlob(run.chunks, run.sampleRate) });
    if (!upload.ok) return this.status(`Not saved: ${await errorText(upload)}`, 'error');
    const { id } = await upload.json();
    await this.save({ name: this.newName(), clip_id: id, transcript: run.body.text });
  }

  async save(body) {
    this.status(`Saving “${body.name}” (the clip is encoded once, now)…`);
    const response = await fetch(new URL('voices', API), {
      method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body),
    });
    if (!response.ok) return this.status(`Not saved: ${await errorText(response)}`, 'error');
    const voice = await response.json();
    this.status(`Saved “${voice.name}”: pick it in a cloning tab.`, 'ok');
    await this.refresh();
  }

  async onListClick(event) {
    const button = event.target.closest('button[data-action]');
    if (!button) return;
    const name = button.closest('li').dataset.name;
    const url = new URL(`voices/${encodeURIComponent(name)}`, API);
    let response;
    if (button.dataset.action === 'delete') {
      if (!window.confirm(`Delete the voice “${name}”?`)) return;
      response = await fetch(url, { method: 'DELETE' });
    } else {
      const newName = window.prompt(`New name for “${name}”`, name);
      if (!newName || newName === name) return;
      response = await fetch(url, { method: 'PATCH', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ name: newName }) });
    }
    this.status(response.ok ? 'Done.' : `Not changed: ${await errorText(response)}`, response.ok ? 'ok' : 'error');
    await this.refresh();
  }
}

function fieldValue(id) {
  const el = document.querySelector(`#${id} textarea, #${id} input`);
  return el ? el.value.trim() : '';
}

window.voxcpmVoices = new VoiceLibraryUI();
