// The voice library in the page (ui/page/panel.py): lists the saved voices, plays, renames and
// deletes them, saves the current clip or the take on screen, and fills the saved-voice picker of each
// cloning tab. static/app.js asks pickedVoice(mode) which voice a request should use.

import { drawn, fieldValue } from '../page/gradio.js';
import { wavBlob } from '../player/pcm.js';
import { arrivedTake } from '../player/player.js';
import { errorText, route, spec } from '../player/server.js';
import { shownTake } from '../workbench/workbench.js';

class VoiceLibraryUI {
  constructor() {
    this.voices = [];
    this.writable = false;
    this.available = true;
    this.picks = {}; // mode -> the picker's choice, kept across re-renders
    this.onPick = () => {}; // (mode, voice or null): static/app.js passes it on (automatic transcripts)
  }

  // Each part is wired when Gradio first draws it: a tab's picker only once the tab is opened.
  start() {
    drawn('#vox-voices').then((root) => this.wireLibrary(root));
    this.refresh();
    spec().then((modes) => {
      this.modes = modes.modes;
      for (const mode of Object.values(modes.modes).filter((m) => m.clip)) {
        drawn(`.vox-voice-pick[data-mode="${mode.name}"]`).then((box) => this.wirePicker(box));
      }
    }).catch((err) => console.warn('voxcpm: the saved-voice pickers need the spec', err));
  }

  picked(mode) {
    const name = this.picks[mode] || '';
    return this.voices.some((v) => v.name === name) ? name : '';
  }

  wireLibrary(root) {
    root.dataset.wired = '1';
    root.querySelector('.vox-save-clip').addEventListener('click', () => this.saveClip());
    root.querySelector('.vox-save-take').addEventListener('click', () => this.saveTake());
    root.querySelector('.vox-voices-list').addEventListener('click', (event) => this.onListClick(event));
    this.render();
  }

  // The picker, and under it what a picked voice means for the request: its clip to play, and that
  // the clip box below is not used (the box and the transcript stayed as they were, and the user
  // could not see what would be used).
  wirePicker(box) {
    box.dataset.wired = '1';
    box.innerHTML = '<label>Saved voice <select class="vox-voice-select"></select></label>' +
      '<div class="vox-voice-using" hidden><span></span> <audio controls preload="none"></audio></div>';
    box.querySelector('select').addEventListener('change', (event) => {
      this.picks[box.dataset.mode] = event.target.value;
      this.showUsing(box);
      this.onPick(box.dataset.mode, this.voices.find((v) => v.name === event.target.value) || null);
    });
    this.fillPicker(box);
  }

  showUsing(box) {
    const voice = this.voices.find((v) => v.name === this.picked(box.dataset.mode));
    const using = box.querySelector('.vox-voice-using');
    const audio = using.querySelector('audio');
    using.hidden = !voice;
    if (!voice) return audio.removeAttribute('src');
    const transcript = voice.transcript && this.modes?.[box.dataset.mode]?.transcript;
    using.querySelector('span').textContent = `Using the saved voice “${voice.name}” (${voice.seconds.toFixed(1)} s` +
      `${transcript ? ', its transcript in the box below' : ''}): the clip box below is not used while it is picked.`;
    audio.setAttribute('aria-label', `The saved voice “${voice.name}”`);
    const src = route(`voices/${encodeURIComponent(voice.name)}/audio`).href;
    if (audio.getAttribute('src') !== src) audio.setAttribute('src', src);
  }

  async refresh() {
    const response = await fetch(route('voices'), { cache: 'no-store' }).catch(() => null);
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
    const root = document.querySelector('#vox-voices[data-wired]');
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
    audio.src = route(`voices/${encodeURIComponent(voice.name)}/audio`);
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
    this.showUsing(box);
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
    const name = fieldValue('mode');
    const mode = (await spec()).modes[name];
    const clipId = mode?.clip ? fieldValue(`${name}_ref`) : '';
    if (!clipId) return this.status('Upload or record a clip in a cloning tab first.', 'error');
    const transcript = mode.transcript ? fieldValue(`${name}_transcript`) : null;
    await this.save({ name: this.newName(), clip_id: clipId, transcript: transcript || null });
  }

  // The take the workbench shows (the one a QA pass picked), else the last one to arrive, as WAV
  // with its text as the transcript.
  async saveTake() {
    const run = shownTake() || arrivedTake();
    if (!run) {
      return this.status('Generate something first: a take can be saved once it has arrived.', 'error');
    }
    this.status('Uploading the take…');
    const upload = await fetch(route('upload'), { method: 'POST', body: wavBlob(run.chunks, run.sampleRate) });
    if (!upload.ok) return this.status(`Not saved: ${await errorText(upload)}`, 'error');
    const { id } = await upload.json();
    await this.save({ name: this.newName(), clip_id: id, transcript: wordsOf(run.body.text) });
  }

  async save(body) {
    this.status(`Saving “${body.name}” (the clip is encoded once, now)…`);
    const response = await fetch(route('voices'), {
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
    const url = route(`voices/${encodeURIComponent(name)}`);
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

// A take's text as its clip says it, for the transcript of a voice saved from it: its pause tags
// are silence, not words, and ultimate cloning reads a transcript as words. They are matched as
// the server first finds them (inference/text/pauses.py, _CANDIDATE); a take that was made had
// only well-formed ones.
// The space around tags in a row is made one: the rest of the text stays as typed.
const PAUSE_TAG = /(?:\s*(?:\[\s*pause\b[^[\]]*\]?|<\s*break\b[^<>]*>?))+\s*/gi;

function wordsOf(text) {
  return text.replace(PAUSE_TAG, ' ').trim();
}

export const voices = new VoiceLibraryUI();

// The saved voice picked in the tab of `mode` ('' for the clip there).
export function pickedVoice(mode) {
  return voices.picked(mode);
}
