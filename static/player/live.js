// Live text: the page's client of WS /v1/audio/speech/stream (ui/http/live.py, docs/api.md). The
// text typed in the Live text box after Start, or a pasted text replayed at a rate of tokens like a
// language model's, goes to the server as it is written; each clause comes back as audio as soon as
// it is complete, in the voice the form gives (a description, a saved voice, or the tab's clip). The audio
// plays through the page's player and panel (Player.adopt) and ends in the workbench like any take;
// the box's status line gives what live text adds: from the first clause's completion to its first
// audio, and the underruns at a seam between clauses.

import { readForm } from '../page/gradio.js';
import { pickedVoice } from '../voices/voices.js';
import { Run } from './run.js';
import { requestBody, route, spec } from './server.js';

// Pieces the size of a model's tokens: words with their space, long words in parts of four letters.
export function tokens(text) {
  return (text.match(/\S+\s*/g) || []).flatMap((word) => word.match(/[\s\S]{1,4}/g));
}

// The session's settings (session.config) from the form, or the sentence that says why there are none.
export function sessionConfig(form, modes, seed) {
  const body = requestBody({ ...form, voice: pickedVoice(form.mode) }, modes, null);
  const config = { type: 'session.config', seed, normalize: body.normalize, sample_rate: modes.sample_rate,
    stream_audio: true, response_format: 'pcm', split_granularity: 'clause' };
  for (const setting of Object.values(modes.settings)) {
    if (setting.page && setting.name !== 'seed' && body[setting.name] != null) config[setting.name] = body[setting.name];
  }
  const style = body.control ? { instructions: body.control } : {};
  if (form.mode === 'design') return { ...config, voice: 'design', instructions: body.control || '' };
  if (body.voice) return { ...config, voice: body.voice, ...style };
  if (!body.reference_id) throw new Error('this tab has no clip: upload or record one, or pick a saved voice');
  // The clip this tab uploaded, with its transcript in ultimate cloning, else the style.
  return { ...config, reference_id: body.reference_id,
    ...(modes.modes[form.mode].transcript ? { ref_text: body.prompt_text || '' } : style) };
}

class LiveText {
  constructor() {
    this.player = null;
    this.ws = null;
    this.run = null;
    this.typed = ''; // what was sent of the box's text while typing
    this.sent = ''; // all text sent in this session
    this.sends = []; // {at (ms from the run's start), chars: all sent so far}
    this.starts = []; // audio.start: {at, samples: where the clause's audio begins, text}
    this.timer = null;
    this.patchSamples = 0;
  }

  el(name) {
    return document.querySelector(`#vox-live [data-live="${name}"]`);
  }

  start(player) {
    this.player = player;
    document.addEventListener('click', (event) => {
      const button = event.target instanceof Element && event.target.closest('#vox-live button[data-live]');
      if (!button) return;
      const act = button.dataset.live;
      if (act === 'start') this.open('typing').catch((err) => this.say(`Error: ${err.message || err}`));
      if (act === 'replay') this.replay().catch((err) => this.say(`Error: ${err.message || err}`));
      if (act === 'finish') this.finish();
    });
    document.addEventListener('input', (event) => {
      if (event.target instanceof Element && event.target.matches('#vox-live [data-live="text"]')) this.typing();
    });
  }

  say(text) {
    const status = this.el('status');
    if (status) status.textContent = text;
  }

  // A session in the form's voice, its run adopted by the player. mode: 'typing' or 'replay'.
  async open(mode) {
    this.close();
    const modes = await spec();
    const form = await readForm();
    const seed = form.random_seed || form.seed == null || form.seed === ''
      ? Math.floor(Math.random() * modes.page_seed_limit) : Math.round(Number(form.seed));
    const config = sessionConfig(form, modes, seed);
    const run = new Run();
    run.sampleRate = modes.sample_rate;
    this.patchSamples = modes.patch_samples; // the server's patch, as its spec gives it
    run.seed = String(seed);
    // Live text's socket sends no words (issue 47 covers the stream route): the box is not asked of it.
    run.body = { ...requestBody({ ...form, voice: pickedVoice(form.mode), word_timestamps: false }, modes, run.id), text: '', seed, live: true };
    run.onStop = () => this.interrupt(run);
    if (!(await this.player.adopt(run))) return null;
    Object.assign(this, { run, typed: '', sent: '', sends: [], starts: [], mode });
    const url = new URL('../v1/audio/speech/stream', route('')); // beside /voxcpm/, wherever the app is mounted
    url.protocol = url.protocol === 'https:' ? 'wss:' : 'ws:';
    const ws = new WebSocket(url);
    ws.binaryType = 'arraybuffer';
    this.ws = ws;
    await new Promise((resolve, reject) => {
      ws.onopen = resolve;
      ws.onerror = () => reject(new Error('the live-text socket could not open'));
    });
    ws.onmessage = (event) => this.received(run, event.data);
    ws.onclose = () => { if (this.ws === ws) this.ws = null; };
    ws.send(JSON.stringify(config));
    this.player.panel.status(mode === 'typing' ? 'Live text: type in the box; Finish when done.' : 'Live text: replaying…');
    this.say(mode === 'typing' ? 'Listening to what you type: each clause is spoken once it is complete.' : 'Replaying…');
    if (mode === 'typing') this.typing();
    return run;
  }

  send(text) {
    if (!this.ws || !text) return;
    this.ws.send(JSON.stringify({ type: 'input.text', text }));
    this.sent += text;
    this.run.body.text = this.sent;
    this.sends.push({ at: performance.now() - this.run.t0, chars: this.sent.length });
  }

  // While typing: what was added to the box since the last piece (text changed before it is spoken as typed).
  typing() {
    if (this.mode !== 'typing' || !this.ws) return;
    const value = this.el('text').value;
    if (value.startsWith(this.typed)) this.send(value.slice(this.typed.length));
    this.typed = value;
  }

  async replay() {
    const text = this.el('text').value;
    if (!text.trim()) return this.say('Paste or type a text to replay first.');
    const run = await this.open('replay');
    if (!run) return;
    const box = this.el('rate'); // its bounds and default are the markup's (ui/page/panel.py)
    const rate = Math.max(Number(box.min), Math.min(Number(box.max), Number(box.value) || Number(box.defaultValue)));
    const pieces = tokens(text);
    const began = performance.now();
    for (let k = 0; k < pieces.length && this.run === run && this.ws; k += 1) {
      await new Promise((resolve) => { this.timer = setTimeout(resolve, Math.max(0, began + (k * 1000) / rate - performance.now())); });
      this.send(pieces[k]);
    }
    if (this.run === run) this.finish();
  }

  finish() {
    if (!this.ws) return this.say('Not started: press Start, or Replay.');
    this.ws.send(JSON.stringify({ type: 'input.done' }));
    this.mode = 'finishing';
    this.say('Finished sending: the rest is being spoken.');
  }

  received(run, data) {
    if (data instanceof ArrayBuffer) return this.player.hear(run, new Int16Array(data));
    const event = JSON.parse(data);
    if (event.type === 'audio.start') this.starts.push({ at: performance.now() - run.t0, samples: run.samples, text: event.sentence_text });
    if (event.type === 'error') this.say(`The server said: ${event.message}`);
    if (event.type === 'session.done') {
      run.live = this.figures(run);
      this.player.ended(run, { state: event.interrupted ? 'cancelled' : 'done', seed: run.seed, live: run.live });
      this.close();
      this.say(describe(run.live));
    }
    if (event.type === 'audio.start' || event.type === 'audio.done') this.say(describe(this.figures(run)));
  }

  // From the piece that completed the first clause (the one that brought the space after it) to its
  // first audio; clauses; underruns, and those within a patch of a clause's start.
  figures(run) {
    const first = this.starts[0];
    const done = first && this.sends.find((s) => s.chars >= first.text.length + 1);
    const patch = this.patchSamples;
    const seams = this.starts.slice(1).map((s) => s.samples);
    const atSeam = run.underrunTimes.filter((u) => seams.some((at) => u.at >= at - patch && u.at <= at + patch)).length;
    return { clauseToAudioMs: first && done && run.firstByteAt != null ? run.firstByteAt - run.t0 - done.at : null,
      clauses: this.starts.length, underruns: run.underruns || 0, atSeams: atSeam };
  }

  interrupt(run) {
    if (this.run !== run || !this.ws) return;
    this.ws.send(JSON.stringify({ type: 'input.interrupt' }));
    this.close();
  }

  close() {
    clearTimeout(this.timer);
    if (this.ws) {
      const ws = this.ws;
      this.ws = null;
      try { ws.send(JSON.stringify({ type: 'session.close' })); } catch (err) { /* already closing */ }
      ws.close();
    }
    this.mode = null;
  }
}

function describe(f) {
  const first = f.clauseToAudioMs == null ? '–' : `${Math.round(f.clauseToAudioMs)} ms`;
  return `First clause complete → its first audio: ${first} · clauses spoken: ${f.clauses} · underruns: ${f.underruns}`
    + ` (${f.atSeams} at a seam between clauses)`;
}

export const liveText = new LiveText();
