// Automatic transcripts in ultimate cloning (POST /voxcpm/transcribe, ui/http/clips.py): once a
// clip is stored (uploaded or recorded), or a saved voice without a transcript is picked, the server's
// speech recognition model transcribes it and the transcript box is filled, marked as automatic by
// the note below it until the user edits the text. Nothing waits for it: the page stays usable while
// it runs, and an answer for a clip that is no longer the one in use is dropped. Text the user typed
// (or an example put there) is never replaced: the automatic transcript is offered beside it instead,
// unless the user asks for it again with the note's "Transcribe again" button.

import { drawn, fieldValue, onInput, setTranscript } from '../page/gradio.js';
import { errorText, route } from '../player/server.js';

const FIELD = 'ultimate_transcript';
const RETRY_S = [1, 30]; // while the model loads: asked again after its Retry-After, within these bounds
const NOTE = '#vox-ultimate-transcript-note';

class AutoTranscript {
  constructor() {
    this.auto = null; // the text this module put in the box, while it is there unedited
    this.stale = null; // the last such text, being cleared from the box (Gradio sets it a moment later)
    this.asked = 0; // the number of the latest request: the answers to older ones are dropped
    this.offered = null; // an automatic transcript not filled in, because the box held the user's text
    this.clipId = '';
    this.source = null; // {body, what}: what was last transcribed, for "Transcribe again"
    this.voiceText = null; // a picked saved voice's own transcript, while the box holds it unedited
    this.before = null; // what the box held before that transcript replaced it: back once no voice is picked
  }

  start() {
    onInput(FIELD, () => this.edited());
    drawn(NOTE).then((note) => note.addEventListener('click', (event) => {
      if (event.target.closest('button[data-action="use"]')) this.useOffered();
      if (event.target.closest('button[data-action="again"]') && this.source) this.ask(this.source.body, this.source.what, true);
    }));
  }

  // The ultimate tab's clip id: a new clip's ('' while it is being stored, or once removed).
  clipStored(id) {
    if (id === this.clipId) return;
    this.clipId = id;
    this.forget();
    if (id) this.ask({ reference_id: id }, 'the clip');
  }

  // The saved voice picked in the ultimate tab (null: the clip below it). A voice saved with its
  // transcript shows it in the box (the box kept the clip's, which would have been sent instead);
  // picking the clip again puts back what the box held, unless the user has edited it since.
  voicePicked(voice) {
    const current = fieldValue(FIELD);
    const unedited = this.voiceText !== null && current === this.voiceText;
    const before = unedited ? this.before : current;
    this.voiceText = null;
    this.before = null;
    this.forget();
    if (voice?.transcript) {
      this.before = before;
      this.voiceText = voice.transcript.trim();
      setTranscript(voice.transcript);
      return this.note('voice', `The saved voice “${voice.name}”'s own transcript: edit it to use other words.`);
    }
    if (unedited) setTranscript(before || '');
    if (voice) this.ask({ voice: voice.name }, `the saved voice “${voice.name}”`);
    else if (this.clipId && !(unedited && before)) this.ask({ reference_id: this.clipId }, 'the clip');
  }

  // The form as Generate sends it: a picked voice's own transcript, unedited, is not sent (the
  // server uses the voice's), so the take says it used the voice's own transcript.
  sent(form) {
    const own = this.voiceText !== null && form.voice && (form[FIELD] || '').trim() === this.voiceText;
    return own ? { ...form, [FIELD]: '' } : form;
  }

  // A new source: what was filled in for the last one goes, unless the user made it theirs.
  forget() {
    this.asked += 1;
    this.offered = null;
    this.source = null;
    if (this.auto !== null && fieldValue(FIELD) === this.auto) {
      this.stale = this.auto;
      setTranscript('');
    }
    this.auto = null;
    this.note('', '');
  }

  // replace: asked for by the user (Transcribe again), so the answer goes in the box whatever is there.
  async ask(body, what, replace = false) {
    const ticket = ++this.asked;
    this.source = { body, what };
    this.note('working', `Transcribing ${what} automatically…`);
    let response = null;
    try {
      response = await fetch(route('transcribe'), {
        method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body),
      });
    } catch (err) { /* below: the server cannot be reached */ }
    const answer = response && response.ok ? await response.json() : null;
    if (ticket !== this.asked) return; // another clip or voice since
    if (!answer && response?.headers.get('X-VoxCPM-Model-State') === 'loading') {
      return this.loading(response, () => { if (ticket === this.asked) this.ask(body, what, replace); });
    }
    if (!answer) {
      const why = response ? await errorText(response) : 'the server cannot be reached';
      // The reason only: the server's next lines are its operator's fix (a command line), not the visitor's.
      const reason = why.split('\n')[0].trim().replace(/\.+$/, '');
      return this.note('error', `Automatic transcript not available: ${reason}. Type the transcript.`);
    }
    if (replace) this.put(answer.text, answer.model);
    else this.fill(answer.text, answer.model);
  }

  // The recognizer is being loaded: the note says so, with the server's own account of how far (from
  // its folder, the cache, or a download and how much of it), and the page asks again by itself after
  // the server's Retry-After, until another clip is picked. The server's words name no download
  // unless one is under way (inference/analysis/loading.py).
  async loading(response, again) {
    const why = (await errorText(response)).split('\n')[0].replace(/: try again in \d+ s\.?$/, '');
    const how = why.replace(/^.*? is (being .*)$/, 'it is $1');
    const wait = Math.min(Math.max(Number(response.headers.get('Retry-After')) || 5, RETRY_S[0]), RETRY_S[1]);
    this.note('loading', `Loading the speech recognizer… ${how}; the transcript follows by itself (asking again in ${wait} s).`);
    setTimeout(again, wait * 1000);
  }

  fill(text, model) {
    const current = fieldValue(FIELD);
    if (current && ![this.auto, this.stale, text.trim()].includes(current)) {
      this.offered = { text, model };
      return this.note('offered', 'An automatic transcript is ready; the box keeps the text already in it.',
        'Use the automatic transcript');
    }
    this.put(text, model);
  }

  put(text, model) {
    this.auto = text.trim();
    setTranscript(text);
    this.note('automatic', `Automatic transcript (${model}): check it against the clip and correct any word; `
      + 'once you edit it, it is yours.');
  }

  useOffered() {
    const offered = this.offered;
    if (!offered) return;
    this.offered = null;
    this.put(offered.text, offered.model);
  }

  edited() {
    if (this.voiceText !== null && fieldValue(FIELD) !== this.voiceText) {
      this.voiceText = null;
      return this.note('edited', 'Edited: your transcript is used instead of the saved voice\'s.');
    }
    if (this.auto === null) return;
    this.auto = null;
    this.note('edited', 'Edited: your transcript is used.');
  }

  // The note under the box; where a transcript was asked for, a button asks for it again (the
  // model was still loading, or an edit went wrong).
  note(state, message, action = null) {
    const el = document.querySelector(NOTE);
    if (!el) return;
    el.dataset.state = state;
    const text = document.createElement('span');
    text.textContent = message;
    const parts = [text];
    if (state === 'automatic') {
      const badge = Object.assign(document.createElement('span'), { className: 'vox-auto-badge', textContent: 'automatic' });
      parts.unshift(badge);
    }
    if (state === 'loading') { // a bar that moves while nothing else does, until the model is there
      parts.unshift(Object.assign(document.createElement('progress'), { className: 'vox-transcript-progress' }));
      parts[0].setAttribute('aria-label', 'Loading the speech recognizer');
    }
    if (action) {
      const button = Object.assign(document.createElement('button'), { type: 'button', textContent: action });
      button.dataset.action = 'use';
      parts.push(button);
    }
    if (this.source && ['automatic', 'edited', 'offered', 'error'].includes(state)) {
      const again = Object.assign(document.createElement('button'), { type: 'button', textContent: 'Transcribe again' });
      again.dataset.action = 'again';
      parts.push(again);
    }
    el.replaceChildren(...parts);
  }
}

export const transcripts = new AutoTranscript();
