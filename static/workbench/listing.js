// The take list as a QA engineer sorts it: a name, a rating and tags per take (edited above its
// waveform), a filter over them and the text, every take's figures as CSV, and a bundle (the zip
// Download bundle writes) imported back as a take.

import { moveAmong, rowScores } from './evaluate.js';
import { describeMeasures, measure } from './measures.js';
import { counted } from '../player/panel.js';
import { audioSettings, deliveryOf, saidSetting, tuned } from './takes.js';
import { isLive, liveFacts } from './livetake.js';
import { readWav } from '../player/pcm.js';
import { strFromU8, unzipSync } from '../vendor/fflate/fflate.esm.js';

const s = (name) => (t) => t.settings[name];
const f = (name) => (t) => t.figures[name];
const m = (name) => (t) => t.measures?.[name];
// settings: the spec's; each numeric setting a take records is a column under its own name.
export const csvColumns = (settings) => [
  ['take', (t) => t.n], ['name', (t) => t.name], ['id', (t) => t.id], ['created', (t) => t.created], ['mode', s('mode')],
  ['delivery', deliveryOf], ['text', s('text')], ['seed', s('seed')], ...tuned(settings).map((x) => [x.name, s(x.name)]),
  ['normalize', s('normalize')], ['trim_silence', s('trim_silence')],
  ['random_seed', s('random_seed')], ['voice', s('voice')], ['outcome', (t) => t.outcome], ['rating', (t) => t.rating],
  ['tags', (t) => (t.tags || []).join('; ')], ['seconds', f('seconds')], ['first_sound_ms', f('first_sound_ms')],
  ['server_first_patch_ms', f('server_first_patch_ms')], ['server_rtf', f('server_rtf')], ['client_rtf', f('client_rtf')],
  ['underruns', f('underruns')], ['gap_ms', f('gap_ms')], ['flagged_boundaries', f('flagged_boundaries')],
  ['lufs', m('lufs')], ['true_peak_dbtp', m('true_peak_dbtp')], ['clipped_samples', m('clipped_samples')],
  ['dc_offset', m('dc_offset')], ['lead_silence_ms', m('lead_silence_ms')], ['tail_silence_ms', m('tail_silence_ms')],
  ['abx_correct', (t) => (t.abx || []).filter((x) => x.correct).length], ['abx_trials', (t) => (t.abx || []).length],
  ['markers', (t) => (t.markers || []).length],
  ...['click', 'glitch', 'mispronunciation'].map((kind) => [`markers_${kind}`, (t) => (t.markers || []).filter((x) => x.kind === kind).length]),
  ['notes', (t) => t.notes],
  // The take's scores (static/workbench/evaluate.js), empty until it is scored or where not available.
  ['error_metric', (t) => (t.evaluation?.intelligibility?.available ? t.evaluation.intelligibility.metric : '')],
  ['error_rate', (t) => (t.evaluation?.intelligibility?.available ? t.evaluation.intelligibility.rate : '')],
  ['speaker_similarity', (t) => (t.evaluation?.similarity?.available ? t.evaluation.similarity.score : '')],
];

// Markers and notes, one row each (the takes' CSV only counts the markers): a take's note has no time.
export const NOTE_COLUMNS = ['take', 'name', 'id', 'kind', 'marker', 'marker_kind', 'ms', 'sample', 'note'];

export function notesCsv(takes) {
  const rows = [NOTE_COLUMNS];
  for (const t of takes) {
    (t.markers || []).forEach((m, i) => rows.push([t.n, t.name, t.id, 'marker', `M${i + 1}`, m.kind || 'other', m.ms,
      Math.round((m.ms / 1000) * t.sampleRate), m.note]));
    if (t.notes) rows.push([t.n, t.name, t.id, 'take note', '', '', '', '', t.notes]);
  }
  return table(rows);
}

function cell(value) {
  if (value == null || (typeof value === 'number' && !isFinite(value))) return '';
  const text = String(value);
  return /[",\n\r]/.test(text) ? `"${text.replace(/"/g, '""')}"` : text;
}

function table(rows) {
  return `${rows.map((r) => r.map(cell).join(',')).join('\r\n')}\r\n`;
}

export function csv(takes, settings) {
  const columns = csvColumns(settings);
  return table([columns.map(([name]) => name), ...takes.map((t) => columns.map(([, get]) => get(t)))]);
}

// Every word of the query somewhere in the take's name, text, tags, mode, outcome, voice or notes.
export function matches(take, query) {
  const words = query.toLowerCase().split(/\s+/).filter(Boolean);
  const hay = [`#${take.n}`, take.name, take.settings.text, ...(take.tags || []), take.settings.mode, take.outcome,
    take.settings.voice, take.notes].filter(Boolean).join(' ').toLowerCase();
  return words.every((w) => hay.includes(w));
}

export function parseTags(text) {
  return [...new Set(text.split(',').map((x) => x.trim()).filter(Boolean))];
}

// A bundle's take: its report (everything but the samples), the streamed WAV's samples, the notes
// and the clip it was cloned from, where the bundle holds it.
export async function takeOfBundle(file) {
  const bytes = new Uint8Array(await file.arrayBuffer());
  if (!(bytes[0] === 0x50 && bytes[1] === 0x4b)) { // "PK": a zip (fflate said only "invalid zip data" of a WAV)
    throw new Error(`“${file.name}” is not a take bundle: Import bundle takes the .zip that Download bundle writes. ` +
      'To compare a recording with the take on screen, use “Load a recording as B…”.');
  }
  const files = unzipSync(bytes);
  const named = (end) => Object.keys(files).find((name) => name.endsWith(end));
  const [json, wav, notes] = [named('.json'), named('-stream.wav'), named('-notes.txt')];
  if (!json || !wav) throw new Error('not a take bundle: it needs the report (.json) and the streamed WAV');
  const { reproduce, ...take } = JSON.parse(strFromU8(files[json]));
  const data = files[wav];
  const { pcm, rate } = readWav(data.buffer.slice(data.byteOffset, data.byteOffset + data.length));
  if (rate !== take.sampleRate || pcm.length !== take.figures.samples) throw new Error('the bundle\'s WAV does not match its report');
  const clip = take.clip && Object.keys(files).find((name) => name.includes('-clip-'));
  return { ...take, pcm: pcm.buffer, notes: notes ? strFromU8(files[notes]) : take.notes || '',
    clip: clip ? { name: take.clip.name, type: take.clip.type, bytes: files[clip].slice().buffer } : null };
}

// The filter and sort controls (static/workbench/sorting.js), CSV export and bundle import.
export function wireListing(wb, on) {
  for (const name of ['filter', 'find-error']) wb.el(name).addEventListener('input', () => wb.render());
  for (const name of ['find-outcome', 'find-rating', 'find-gaps', 'find-flagged', 'sort']) wb.el(name).addEventListener('change', () => wb.render());
  on('filter-clear', async () => { // every criterion back to "any"; the order is no filter, and stays
    for (const name of ['filter', 'find-outcome', 'find-rating', 'find-error']) wb.el(name).value = '';
    for (const name of ['find-gaps', 'find-flagged']) wb.el(name).checked = false;
    wb.render();
  });
  on('csv', async () => {
    for (const t of wb.takes) if (!t.measures) await wb.save(t, { measures: measure(new Int16Array(t.pcm), t.sampleRate) });
    wb.download(new Blob([csv(wb.takes, wb.served?.settings)], { type: 'text/csv' }), `voxcpm2-takes-${new Date().toISOString().slice(0, 10)}.csv`);
  });
  on('notes-csv', async () => wb.download(new Blob([notesCsv(wb.takes)], { type: 'text/csv' }),
    `voxcpm2-markers-notes-${new Date().toISOString().slice(0, 10)}.csv`));
  const input = wb.el('import');
  input.addEventListener('change', async () => {
    await importBundles(wb, [...input.files]);
    input.value = '';
  });
}

// Bundles chosen on Import bundle, or dropped on it, imported in turn until one is refused.
export async function importBundles(wb, files) {
  try {
    for (const file of files) await wb.adopt(await takeOfBundle(file));
  } catch (err) {
    wb.say(`Not imported: ${err.message || err}`);
  }
}

// The name, rating and tags fields above the waveform: filled from the take shown, saved on change.
export class TakeFields {
  constructor(wb) {
    this.wb = wb;
    this.name = wb.el('name');
    this.rating = wb.el('rating');
    this.tags = wb.el('tags');
    const save = (changes) => wb.save(wb.selected, changes).then(() => wb.render());
    this.name.addEventListener('change', () => save({ name: this.name.value.trim() }));
    this.rating.addEventListener('change', () => {
      this.nameRating();
      save({ rating: Number(this.rating.value) || null });
    });
    this.tags.addEventListener('change', () => save({ tags: parseTags(this.tags.value) }));
  }

  show(take) {
    this.name.value = take.name || '';
    this.rating.value = String(take.rating || '');
    this.nameRating();
    this.tags.value = (take.tags || []).join(', ');
  }

  // Named by its value: from its label and the option shown, a screen reader said "Rating –" or
  // "Rating ★★★" (issue 58), the dash and the stars read out sign by sign.
  nameRating() {
    const n = Number(this.rating.value);
    this.rating.setAttribute('aria-label', n ? `Rating: ${n} of 5` : 'Rating: not rated');
  }
}

// The workbench's markup for takes: a row of the take list, and the facts above the waveform.
// One tab stop for the whole list (the buttons of the row in focus; arrow keys move between rows),
// so Tab goes past a list of any length to the take on screen.
export function takeRow(t, settings, selected, focusable = selected) {
  const li = document.createElement('li');
  li.dataset.take = t.id;
  li.className = selected ? 'vox-take selected' : 'vox-take';
  const f = t.figures;
  const state = t.outcome + (f.underruns ? `, ${counted(f.underruns, 'gap')}` : '');
  const label = document.createElement('span');
  const about = [t.name ? `“${t.name}”` : '', t.rating ? '★'.repeat(t.rating) : '', ...(t.tags || []).map((x) => `[${x}]`)];
  label.textContent = `#${t.n} ${about.filter(Boolean).map((x) => `${x} `).join('')}${isLive(t) ? 'live · ' : ''}${t.settings.mode} · seed ${t.settings.seed} · cfg ${t.settings.cfg_value} · ` +
    `${t.settings.inference_timesteps} steps${processing(t.settings, settings).map((x) => ` · ${x}`).join('')} · ${f.seconds.toFixed(2)} s · ${state}` +
    (f.flagged_boundaries ? ` · ${f.flagged_boundaries} flagged` : '') + rowScores(t);
  const buttons = [['select', 'Show'], ['as-b', 'Compare as B'], ['reuse', 'Re-use settings'], ['delete', 'Delete']]
    .map(([act, text]) => {
      const b = Object.assign(document.createElement('button'), { textContent: text, type: 'button', className: 'vox-wb-button' });
      b.setAttribute('aria-label', `${text}: take ${t.n}`);
      b.dataset.act = act;
      b.tabIndex = focusable ? 0 : -1;
      return b;
    });
  const text = document.createElement('span');
  text.className = 'vox-take-text';
  text.textContent = `“${t.settings.text}”`;
  text.title = t.settings.text;
  li.append(label, ...buttons, text);
  return li;
}

// Up and Down on a row's button: the same button in the row above or below takes the focus.
export function moveInList(event) {
  const button = event.target.closest('button[data-act]');
  const row = button?.closest('[data-take]');
  const next = row && (event.key === 'ArrowDown' ? row.nextElementSibling : event.key === 'ArrowUp' ? row.previousElementSibling : null);
  if (!next) return;
  event.preventDefault();
  row.querySelectorAll('button').forEach((b) => { b.tabIndex = -1; });
  next.querySelectorAll('button').forEach((b) => { b.tabIndex = 0; });
  next.querySelector(`button[data-act="${button.dataset.act}"]`).focus();
}

// What was done to the text and audio besides the model's settings, for a take's row: only what is
// not the default, so a plain take's row stays as short as before.
function processing(s, settings) {
  const changed = tuned(settings).filter((x) => x.audio && s[x.name] != null && s[x.name] !== x.default);
  return [...changed.map((x) => `${s[x.name]}${x.unit}`), s.normalize ? 'normalized' : '',
    s.trim_silence ? 'trimmed' : ''].filter(Boolean);
}

export function summary(t, settings) {
  const s = t.settings;
  const f = t.figures;
  const fmt = (v, d = 0, unit = '') => (v == null || !isFinite(v) ? '–' : `${v.toFixed(d)}${unit}`);
  const live = isLive(t);
  const rows = [
    ['Take', `#${t.n}, ${t.created}, ${t.outcome}${t.status ? `: ${t.status}` : ''}${live ? ', live text' : ''}`],
    ...(live ? liveFacts(t) : []),
    ['Settings', [`${s.mode}, seed ${s.seed}${s.random_seed ? ' (drawn at random)' : ''}`,
      ...tuned(settings).filter((x) => !x.audio).map((x) => saidSetting(x, s[x.name])),
      ...audioSettings(s, settings, s.mode !== 'design')].join(', ')],
    ['Text as spoken', s.text_as_spoken],
    [s.mode === 'design' ? 'Description' : 'Style / transcript', s.control || s.prompt_text ||
      (s.voice && s.mode === 'ultimate' ? `the saved voice “${s.voice}”'s own transcript` : '–')],
    ['Clip', s.voice ? `saved voice “${s.voice}”` : s.clip_name ? `${s.clip_name} (id ${s.reference_id})` : '–'],
    ['Model', `${s.model ?? '–'} @ ${s.revision ?? '–'}${s.lora ? `, LoRA ${s.lora}` : ''}, app ${s.app_version ?? '–'}`],
    ['Figures', `first byte ${fmt(f.first_byte_ms, 0, ' ms')}, first sound ${fmt(f.first_sound_ms, 0, ' ms')}` +
      `${live && t.live ? ' (from the first clause\'s commit)' : ''}, ` +
      `server first patch ${fmt(f.server_first_patch_ms, 0, ' ms')}, server RTF ${fmt(f.server_rtf, 3)}, client RTF ${fmt(f.client_rtf, 3)}`],
    ['Levels', t.measures ? describeMeasures(t.measures) : '–'],
    ['Gaps', f.underruns ? [`${counted(f.underruns, 'underrun')}, ${Math.round(f.gap_ms)} ms in all: `, ...gapLinks(t)] : 'none'],
  ];
  return rows.map(([k, v]) => {
    const row = document.createElement('div');
    row.className = 'vox-wb-fact';
    row.append(Object.assign(document.createElement('b'), { textContent: `${k}: ` }), ...[].concat(v));
    return row;
  });
}

// Each gap where it fell, as a position (they read as durations: "160 ms, 320 ms"), with its
// length; a click moves the cursor there (the workbench listens on the facts for data-at). One Tab
// stop for them all, the arrow keys moving between them: a Tab stop each made a take with many
// gaps dozens of presses long (issue 58).
function gapLinks(t) {
  const buttons = t.figures.underrun_times.map((u, i) => {
    const b = Object.assign(document.createElement('button'), { type: 'button', className: 'vox-wb-at', tabIndex: i ? -1 : 0,
      textContent: `at ${(u.at_samples / t.sampleRate).toFixed(3)} s (${u.gap_ms == null ? '?' : Math.round(u.gap_ms)} ms gap)` });
    b.dataset.at = u.at_samples / t.sampleRate;
    b.addEventListener('keydown', (e) => moveAmong(buttons, e));
    return b;
  });
  return buttons.flatMap((b, i) => (i ? [', ', b] : [b]));
}
