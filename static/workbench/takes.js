// The take history, kept in this browser's IndexedDB so it survives a reload: each take's samples
// (int16), settings and figures. Bounded: past the server's limits (GET /voxcpm/spec's `workbench`:
// kept_mb, kept_takes) the oldest takes go.

import { FLAG_THRESHOLD, boundaryScores } from './analysis.js';
import { heardText, liveRecord } from '../player/liverecord.js';
import { patchCount } from '../player/panel.js';
import { heardRtf } from '../player/run.js';

const DB = 'voxcpm-qa';
const STORE = 'takes';
const STATE = 'state'; // what the workbench keeps besides takes: {key, ...} (the recording loaded as B)

function request(req) {
  return new Promise((resolve, reject) => {
    req.onsuccess = () => resolve(req.result);
    req.onerror = () => reject(req.error);
  });
}

export class TakeStore {
  async open() {
    if (!this.db) {
      const req = indexedDB.open(DB, 2);
      req.onupgradeneeded = () => {
        const names = req.result.objectStoreNames;
        if (!names.contains(STORE)) req.result.createObjectStore(STORE, { keyPath: 'id' });
        if (!names.contains(STATE)) req.result.createObjectStore(STATE, { keyPath: 'key' });
      };
      this.db = await request(req);
    }
    return this.db;
  }

  async tx(mode, fn, store = STORE) {
    const db = await this.open();
    const tx = db.transaction(store, mode);
    const result = await fn(tx.objectStore(store));
    await new Promise((resolve, reject) => { tx.oncomplete = resolve; tx.onerror = () => reject(tx.error); });
    return result;
  }

  // Oldest first.
  async list() {
    const takes = await this.tx('readonly', (s) => request(s.getAll()));
    return takes.sort((a, b) => a.n - b.n);
  }

  // Stores takes (one, or a list: an undone Clear all), then evicts the oldest until the history
  // fits; returns the ids evicted.
  async put(take) {
    const takes = Array.isArray(take) ? take : [take];
    await this.tx('readwrite', (s) => Promise.all(takes.map((t) => request(s.put(t)))));
    return this.evict();
  }

  // A take already stored, changed in what it says of itself (notes, rating, markers...): its
  // samples are the same, so the history's size is too.
  async update(take) {
    await this.tx('readwrite', (s) => request(s.put(take)));
  }

  async evict() {
    const takes = await this.list();
    let bytes = totalBytes(takes);
    const evicted = [];
    const { kept_mb: mb, kept_takes: most } = this.limits || { kept_mb: Infinity, kept_takes: Infinity };
    while (takes.length > 1 && (bytes > mb * 2 ** 20 || takes.length > most)) {
      const old = takes.shift();
      bytes -= takeBytes(old);
      evicted.push(old.id);
    }
    for (const id of evicted) await this.remove(id);
    return evicted;
  }

  async remove(id) {
    await this.tx('readwrite', (s) => request(s.delete(id)));
  }

  async clear() {
    await this.tx('readwrite', (s) => request(s.clear()));
  }

  // A record kept besides the takes, by its key (undefined where none is).
  state(key) {
    return this.tx('readonly', (s) => request(s.get(key)), STATE);
  }

  keep(record) {
    return this.tx('readwrite', (s) => request(s.put(record)), STATE);
  }
}

// The numeric settings a take records, compares and re-uses: the spec's (GET /voxcpm/spec,
// `settings`) that the page's form sets, in the spec's order; the seed is a take's own field.
export function tuned(settings) {
  return Object.values(settings || {}).filter((x) => x.page && x.name !== 'seed');
}

// How a recorded value reads: "cfg 2", "normalize on"; a take kept before the setting was
// recorded says so.
export function saidSetting(x, value) {
  return value == null ? `${x.short} not recorded` : `${x.short} ${value}${x.unit}`;
}

// What was done to the audio besides the model's settings, as a take's lines say it: the spec's
// audio settings, normalize, and trim where the mode has a clip.
export function audioSettings(s, settings, clip) {
  const on = (name, label) => (s[name] == null ? `${label} not recorded` : `${label} ${s[name] ? 'on' : 'off'}`);
  return [...tuned(settings).filter((x) => x.audio).map((x) => saidSetting(x, s[x.name])), on('normalize', 'normalize'),
    ...(clip ? [on('trim_silence', 'trim silence')] : [])];
}

// How a take's text reached the model: 'live' (over the live-text socket, clause by clause as it
// was written) or 'whole'. A take kept before takes recorded it says so in its request's body.
export function deliveryOf(take) {
  return take.settings.delivery ?? (take.body?.live ? 'live' : 'whole');
}

// The settings that make a take what it is, in the order a QA engineer reads them, for the
// A/B settings diff; the rest (model, build...) follow. Live against whole comes first: it changes
// how the audio was made more than any setting (issue 58: the table blamed the model and the app).
function said(settings) {
  return [['delivery', 'live / whole'], ['mode', 'mode'], ['text', 'text'], ['control', 'description / style'], ['prompt_text', 'transcript'],
    ['voice', 'voice'], ['clip_name', 'clip'], ['seed', 'seed'], ...tuned(settings).map((x) => [x.name, x.short]),
    ['normalize', 'normalize'], ['trim_silence', 'trim silence'],
    ['model', 'model'], ['revision', 'revision'], ['lora', 'LoRA'], ['app_version', 'app']];
}

// What differs between two takes' settings: [label, A's value, B's value] for each setting that does.
export function settingsDiff(a, b, settings) {
  const same = (x, y) => JSON.stringify(x ?? null) === JSON.stringify(y ?? null);
  const value = (t, key) => (key === 'delivery' ? deliveryOf(t) : t.settings[key] ?? null);
  return said(settings).filter(([key]) => !same(value(a, key), value(b, key)))
    .map(([key, label]) => [label, value(a, key), value(b, key)]);
}

// What a take holds in the browser: its samples and the clip it was cloned from (static/workbench/clip.js).
export function takeBytes(t) {
  return t.pcm.byteLength + (t.clip ? t.clip.bytes.byteLength : 0);
}

export function totalBytes(takes) {
  return takes.reduce((sum, t) => sum + takeBytes(t), 0);
}

// A take: a finished, stopped or failed run as the workbench keeps it (TakeStore, above,
// stores it), with its samples, what was asked and what was measured; and the form a take's
// settings fill in again (Re-use settings).
// server: the stream's status frame, or for a stopped stream (which has none) the job's status;
// settings: the spec's.
export function takeOf(run, n, server, settings) {
  const pcm = new Int16Array(run.samples);
  let at = 0;
  for (const c of run.chunks) { pcm.set(c, at); at += c.length; }
  const scores = boundaryScores(pcm, run.boundaries, run.sampleRate);
  const live = run.liveLog ? liveRecord(run) : null;
  return {
    id: run.id, n, created: new Date().toISOString(), sampleRate: run.sampleRate, pcm: pcm.buffer, body: run.body,
    outcome: run.state, status: run.error || '', notes: '', abx: [], boundaries: run.boundaries, scores,
    settings: settingsOf(run, server || {}, settings, live), figures: figuresOf(run, scores, server || {}), segments: segmentsOf(server),
    live,
    words: run.words ? { source: 'stream', list: run.words, errors: run.wordErrors } : null,
  };
}

// A text read in several segments, or with pauses: each segment's text as spoken, the sample where
// its audio ends (a pause's silence included: it belongs to the segment it follows), and the pauses.
function segmentsOf(server) {
  const texts = server?.segments;
  const pauses = server?.pauses || [];
  return texts && (texts.length > 1 || pauses.length) ? { texts, ends: server.segment_ends || [], pauses } : null;
}

// A live take that played to its end was spoken as the server's request says (normalized); one
// stopped, as the clauses whose audio it holds say.
function settingsOf(run, final, settings, live) {
  const b = run.body;
  const spoken = live && (run.state !== 'finished' || final.spoken_text == null) ? heardText(live) : final.spoken_text ?? b.text;
  return { mode: b.mode, text: b.text, text_as_spoken: spoken, delivery: live ? 'live' : 'whole', control: b.control ?? null,
    prompt_text: b.prompt_text ?? null, voice: b.voice ?? null, clip_name: b.voice ? null : run.clip ?? null, reference_id: b.reference_id ?? null,
    seed: run.seed, random_seed: b.seed == null, ...Object.fromEntries(tuned(settings).map((x) => [x.name, b[x.name] ?? x.default])),
    normalize: Boolean(b.normalize), trim_silence: Boolean(b.trim_silence),
    model: final.model ?? null, revision: final.revision ?? null, lora: final.lora ?? null,
    app_version: final.app_version ?? null };
}

// A live take's first byte and first sound count from its first clause's commit (run.firstFromMs),
// as the panel showed them; its server RTF, which no metadata frame gives, is the request's
// (its status, over the audio sent) where the run has none of its own.
function figuresOf(run, scores, final) {
  const rate = run.sampleRate;
  const from = run.t0 + (run.firstFromMs ?? 0);
  const rtf = run.serverRtf();
  return { first_byte_ms: run.firstByteAt == null ? null : run.firstByteAt - from,
    first_sound_ms: run.audibleAt == null ? null : run.audibleAt - from + run.outputLatencyMs,
    // The panel's figure, over the audio the take holds: for a stopped stream the job's status
    // (which it has instead of a status frame) counts the time until the cancel landed over what
    // the server made, and read 2.766 where the panel had said 2.304.
    server_first_patch_ms: final.ttfp_s == null ? null : final.ttfp_s * 1000,
    server_rtf: Number.isFinite(rtf) ? rtf : heardRtf(final, [], rate),
    client_rtf: run.clientRtf(), patches: patchCount(run.boundaries), samples: run.samples, seconds: run.samples / rate,
    underruns: run.underruns, gap_ms: run.gapMs(),
    underrun_times: run.underrunTimes.map((u) => ({ at_samples: u.at, at_ms: (u.at / rate) * 1000, gap_ms: u.gapMs })),
    flagged_boundaries: scores.filter((s) => s.flagged).length, flag_threshold: FLAG_THRESHOLD };
}

// The form's fields (as static/player/server.js reads them) that give this take again, for the
// mode as the spec states it; the clip goes back by its server id where the take kept no clip of
// its own (with one, the clip's box sets the id once the workbench puts the clip back), and
// a saved voice by its name (the workbench sets the tab's picker: it is not a Gradio field). The
// seed is fixed (Random seed off): the workbench turns Random seed back on after the next take
// if it was on (Workbench.reuse). A setting the take did not record (kept before it was) leaves
// its field as it is (null).
export function formOfTake(take, mode, settings) {
  const s = take.settings;
  const form = { mode: s.mode, text: s.text, random_seed: false, seed: s.seed == null ? null : Number(s.seed),
    ...Object.fromEntries(tuned(settings).map((x) => [x.name, s[x.name] ?? null])),
    normalize: s.normalize ?? null, trim_silence: mode.clip ? s.trim_silence ?? null : null };
  if (mode.control) form[`${s.mode}_control`] = s.control ?? '';
  if (mode.clip) form[`${s.mode}_ref`] = take.clip ? null : s.reference_id;
  if (mode.transcript) form[`${s.mode}_transcript`] = s.prompt_text;
  return form;
}
