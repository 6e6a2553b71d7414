// Live text: the page's client of WS /v1/audio/speech/stream (ui/http/live.py, docs/api.md). The
// text typed in the Live text box after Start, or a pasted text replayed at a rate of tokens like a
// language model's, goes to the server as it is written; each clause comes back as audio as soon as
// it is complete, in the voice the form gives (a description, a saved voice, or the tab's clip). The audio
// plays through the page's player and panel (Player.adopt) and ends in the workbench as a live take,
// with its clause timings (static/player/liverecord.js) and the server's figures for its request;
// the box's status line gives what live text adds: from the first clause's completion to its first
// audio, and the underruns at a seam between clauses.

import { drawn, openLiveText, readForm } from '../page/gradio.js';
import { firstCommitMs, statusFigures } from './liverecord.js';
import { Run } from './run.js';
import { requestBody, route, spec } from './server.js';

// Pieces the size of a model's tokens: words with their space, long words in parts of four letters.
export function tokens(text) {
  return (text.match(/\S+\s*/g) || []).flatMap((word) => word.match(/[\s\S]{1,4}/g));
}

// A replay's pieces: [{at (ms from the first), text}], at `rate` tokens a second.
export function paced(text, rate) {
  return tokens(text).map((piece, k) => ({ at: (k * 1000) / rate, text: piece }));
}

// A live take's pieces as it sent them, at the times it sent them: a Re-use sends them again at the
// same pace, so its clauses are committed, and its seams fall, as the take's did.
export function recorded(take) {
  let before = 0;
  return take.live.pieces.map((p) => {
    const piece = { at: p.at_ms, text: take.settings.text.slice(before, p.chars) };
    before = p.chars;
    return piece;
  });
}

// The session's settings (session.config) from the form (with the voice picked for its tab), or the
// sentence that says why there are none.
export function sessionConfig(form, modes, seed) {
  const body = requestBody(form, modes, null);
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

const ON_ITS_WAY = ['sending', 'streaming', 'received']; // the player's states of a run not yet ended

class LiveText {
  constructor() {
    this.player = null;
    this.pickedVoice = null; // (mode) => the saved voice picked for the tab, from the voice library
    this.ws = null;
    this.run = null;
    this.typed = ''; // what was sent of the box's text while typing
    this.timer = null;
    this.mode = null; // 'typing', 'replay', 'finishing', or null once the socket is closed
    this.after = null; // a Generate pressed during the session: it starts once the live take is kept
  }

  el(name) {
    return document.querySelector(`#vox-live [data-live="${name}"]`);
  }

  // The voice library's pick is handed in (static/app.js), not imported: the library imports the
  // player and the workbench, which import this module.
  start(player, pickedVoice) {
    Object.assign(this, { player, pickedVoice });
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

  // A session in the form's voice, its run adopted by the player. mode: 'typing' or 'replay';
  // source: what the take says it was ('typed', 'replay', or 'reuse' of an earlier live take).
  async open(mode, source = mode === 'typing' ? 'typed' : mode) {
    this.close();
    const modes = await spec();
    const read = await readForm();
    const form = { ...read, voice: this.pickedVoice(read.mode) };
    const seed = form.random_seed || form.seed == null || form.seed === ''
      ? Math.floor(Math.random() * modes.page_seed_limit) : Math.round(Number(form.seed));
    const config = sessionConfig(form, modes, seed);
    const run = new Run();
    run.sampleRate = modes.sample_rate;
    run.seed = String(seed);
    // Live text's socket sends no words (issue 47 covers the stream route): the box is not asked of it.
    // The body's seed stays as the form asked (null: drawn at random), which the take records.
    run.body = { ...requestBody({ ...form, word_timestamps: false }, modes, run.id), text: '', live: true };
    run.liveLog = { source, rate: null, sends: [], starts: [], finishedAt: null, patchSamples: modes.patch_samples, requestId: null };
    run.onStop = () => this.interrupt(run);
    run.onKept = () => this.kept(run);
    if (!(await this.player.adopt(run))) return null;
    Object.assign(this, { run, typed: '', mode });
    await this.connect(run, config);
    this.player.panel.status(mode === 'typing' ? 'Live text: type in the box; Finish when done.' : 'Live text: replaying…');
    this.say(mode === 'typing' ? 'Listening to what you type: each clause is spoken once it is complete.' : 'Replaying…');
    if (mode === 'typing') this.typing();
    return run;
  }

  async connect(run, config) {
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
    ws.onclose = () => this.lost(run, ws);
    ws.send(JSON.stringify(config));
  }

  send(text) {
    if (!this.ws || !text) return;
    this.ws.send(JSON.stringify({ type: 'input.text', text }));
    this.run.body.text += text;
    this.run.liveLog.sends.push({ at: performance.now() - this.run.t0, chars: this.run.body.text.length });
  }

  // While typing: what was added to the box since the last piece (text changed before it is spoken as typed).
  typing() {
    if (this.mode !== 'typing' || !this.ws) return;
    const value = this.el('text').value;
    if (value.startsWith(this.typed)) this.send(value.slice(this.typed.length));
    this.typed = value;
  }

  // The box's text sent as a model would, at the rate of tokens given; or `pieces` ({at, text}: a
  // Re-use's, at the pace they were recorded).
  async replay(pieces = null, source = 'replay') {
    const text = this.el('text').value;
    if (!text.trim()) return this.say('Paste or type a text to replay first.');
    const run = await this.open('replay', source);
    if (!run) return;
    const box = this.el('rate'); // its bounds and default are the markup's (ui/page/panel.py)
    const rate = Math.max(Number(box.min), Math.min(Number(box.max), Number(box.value) || Number(box.defaultValue)));
    if (!pieces) run.liveLog.rate = rate;
    const began = performance.now();
    for (const piece of pieces || paced(text, rate)) {
      await new Promise((resolve) => { this.timer = setTimeout(resolve, Math.max(0, began + piece.at - performance.now())); });
      if (this.run !== run || this.mode !== 'replay') return; // stopped, finished, or replaced meanwhile
      this.send(piece.text);
    }
    this.finish();
  }

  // A live take's text through the socket again, piece by piece at the pace it was sent, in the
  // voice and seed the form holds (the workbench's Re-use has just put the take's there). The Live
  // text box opens, its text the take's, so what is being sent is on screen.
  async again(take) {
    await openLiveText();
    (await drawn('#vox-live [data-live="text"]')).value = take.settings.text;
    return this.replay(recorded(take), 'reuse');
  }

  finish() {
    if (!this.ws) return this.say('Not started: press Start, or Replay.');
    if (!this.run.body.text.trim()) return this.discard('Finished with nothing typed: the live session is closed.');
    this.ws.send(JSON.stringify({ type: 'input.done' }));
    this.run.liveLog.finishedAt = performance.now() - this.run.t0;
    this.mode = 'finishing';
    this.say('Finished sending: the rest is being spoken.');
  }

  // A session with nothing to speak: closed, its (silent) run stopped; the server sends no
  // session.done for an utterance with no text.
  discard(message) {
    this.close();
    this.player.stop();
    this.say(message);
  }

  received(run, data) {
    if (data instanceof ArrayBuffer) return this.player.hear(run, new Int16Array(data));
    const event = JSON.parse(data);
    if (event.type === 'audio.start') this.clauseStarts(run, event);
    if (event.type === 'error') this.say(`The server said: ${event.message}`);
    if (event.type === 'session.done') this.done(run, event).catch((err) => console.error('voxcpm: live text', err));
    if (event.type === 'audio.start' || event.type === 'audio.done') this.say(describe(statusFigures(run)));
  }

  // Where a clause's audio begins; the first one's commit is where the run's first-audio figures
  // count from (the panel's too), and its request names the job whose figures the take keeps.
  clauseStarts(run, event) {
    const log = run.liveLog;
    log.requestId ??= event.request_id ?? null;
    log.starts.push({ at: performance.now() - run.t0, samples: run.samples, text: event.sentence_text });
    run.firstFromMs ??= firstCommitMs(log);
  }

  // All its audio is in: the take gets the server's figures and build for its request, as a
  // stream's status frame gives them (ui/http/live.py names it: docs/api.md).
  async done(run, event) {
    if (this.run === run) this.close();
    const job = await jobStatus(event.request_id ?? run.liveLog.requestId);
    run.live = statusFigures(run);
    const state = event.interrupted ? 'cancelled' : ['cut', 'failed'].includes(job?.state) ? job.state : 'done';
    this.player.ended(run, { ...job, state, seed: Number(run.seed), live: run.live });
    if (this.run !== run) return; // another session has begun meanwhile: the line is its own
    this.say(describe(run.live) + (this.after ? ' · the Generate you pressed starts once this has played.' : ''));
  }

  // The socket closed before the utterance was done (the server's idle rule, say): what was heard
  // is kept, as a cut take, and the line says so instead of still listening.
  lost(run, ws) {
    if (this.ws !== ws) return; // closed by the page itself
    this.ws = null;
    this.mode = null;
    if (this.player.run !== run || !['sending', 'streaming'].includes(run.state)) return;
    const status = this.el('status')?.textContent || '';
    const said = status.startsWith('The server said') ? `${status} ` : '';
    this.say(`${said}The live session was closed by the server before its utterance was done.`);
    if (!run.samples) return this.player.stop();
    run.live = statusFigures(run);
    this.player.ended(run, { state: 'cut', error: 'the live session closed before its utterance was done', seed: Number(run.seed), live: run.live });
  }

  // Generate (or Ctrl+Enter) while a live session is open or still playing: what was typed is
  // finished (the rest spoken), kept as a take, and the Generate starts once it has played. Issue
  // 58: the Generate cancelled the session on the server while this line still said it was
  // listening, and the typed clauses were never spoken. False where no live session is going.
  generateAfter(go) {
    const run = this.run;
    if (!run || this.player.run !== run || !ON_ITS_WAY.includes(run.state)) return false;
    if (this.ws && !run.body.text.trim()) {
      this.discard('Live text ended: nothing had been typed. Generating the form\'s text instead.');
      return false;
    }
    this.after = go;
    if (this.ws && this.mode !== 'finishing') this.finish();
    this.say(`Generate pressed: ${this.ws ? 'what you typed is finished first (the rest is being spoken), ' : 'this live take plays to its end, '}` +
      'kept as a take, and the Generate starts once it has played. Stop stops both.');
    return true;
  }

  // The player has kept the run as a take: a Generate pressed meanwhile starts now, unless Stop ended it.
  kept(run) {
    const go = this.after;
    this.after = null;
    if (!go) return;
    if (run.state === 'stopped') return this.say('Stopped: what was heard is kept as a take; the Generate pressed meanwhile was not started.');
    this.say(`${describe(run.live || statusFigures(run))} · kept as a take; generating the form's text now.`);
    go();
  }

  interrupt(run) {
    if (this.run !== run || !this.ws) return;
    this.ws.send(JSON.stringify({ type: 'input.interrupt' }));
    this.close();
    run.live = statusFigures(run);
    this.say(`Stopped: what was heard is kept as a take${this.after ? '; the Generate pressed meanwhile was not started' : ''}.`);
    this.after = null;
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

// A request's status with the build (GET /voxcpm/jobs/{id}), or null where the server has none.
async function jobStatus(id) {
  if (!id) return null;
  const response = await fetch(route(`jobs/${id}`), { cache: 'no-store' }).catch(() => null);
  return response && response.ok ? response.json() : null;
}

function describe(f) {
  const first = f.clauseToAudioMs == null ? '–' : `${Math.round(f.clauseToAudioMs)} ms`;
  return `First clause complete → its first audio: ${first} · clauses spoken: ${f.clauses} · underruns: ${f.underruns}`
    + ` (${f.atSeams} at a seam between clauses)`;
}

export const liveText = new LiveText();
