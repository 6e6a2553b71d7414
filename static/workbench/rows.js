// The workbench's markup for takes: a row of the take list, and the facts above the waveform.

import { describeMeasures } from './measures.js';

// One tab stop for the whole list (the buttons of the row in focus; arrow keys move between rows),
// so Tab goes past a list of any length to the take on screen.
export function takeRow(t, selected, focusable = selected) {
  const li = document.createElement('li');
  li.dataset.take = t.id;
  li.className = selected ? 'vox-take selected' : 'vox-take';
  const f = t.figures;
  const state = t.outcome + (f.underruns ? `, ${f.underruns} gaps` : '');
  const label = document.createElement('span');
  const about = [t.name ? `“${t.name}”` : '', t.rating ? '★'.repeat(t.rating) : '', ...(t.tags || []).map((x) => `[${x}]`)];
  label.textContent = `#${t.n} ${about.filter(Boolean).map((x) => `${x} `).join('')}${t.settings.mode} · seed ${t.settings.seed} · cfg ${t.settings.cfg_value} · ` +
    `${t.settings.inference_timesteps} steps · ${f.seconds.toFixed(2)} s · ${state}` +
    (f.flagged_boundaries ? ` · ${f.flagged_boundaries} flagged` : '');
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

export function summary(t) {
  const s = t.settings;
  const f = t.figures;
  const fmt = (v, d = 0, unit = '') => (v == null || !isFinite(v) ? '–' : `${v.toFixed(d)}${unit}`);
  const rows = [
    ['Take', `#${t.n}, ${t.created}, ${t.outcome}${t.status ? `: ${t.status}` : ''}`],
    ['Settings', `${s.mode}, seed ${s.seed}, cfg ${s.cfg_value}, ${s.inference_timesteps} timesteps, max ${s.max_len} patches`],
    ['Text as spoken', s.text_as_spoken],
    [s.mode === 'design' ? 'Description' : 'Style / transcript', s.control || s.prompt_text ||
      (s.voice && s.mode === 'ultimate' ? `the saved voice “${s.voice}”'s own transcript` : '–')],
    ['Clip', s.voice ? `saved voice “${s.voice}”` : s.clip_name ? `${s.clip_name} (id ${s.reference_id})` : '–'],
    ['Model', `${s.model ?? '–'} @ ${s.revision ?? '–'}${s.lora ? `, LoRA ${s.lora}` : ''}, app ${s.app_version ?? '–'}`],
    ['Figures', `first byte ${fmt(f.first_byte_ms, 0, ' ms')}, first sound ${fmt(f.first_sound_ms, 0, ' ms')}, ` +
      `server first patch ${fmt(f.server_first_patch_ms, 0, ' ms')}, server RTF ${fmt(f.server_rtf, 3)}, client RTF ${fmt(f.client_rtf, 3)}`],
    ['Levels', t.measures ? describeMeasures(t.measures) : '–'],
    ['Gaps', f.underruns ? `${f.underruns} underruns, ${Math.round(f.gap_ms)} ms: ` +
      f.underrun_times.map((u) => `${Math.round(u.at_ms)} ms`).join(', ') : 'none'],
  ];
  return rows.map(([k, v]) => {
    const row = document.createElement('div');
    row.className = 'vox-wb-fact';
    row.append(Object.assign(document.createElement('b'), { textContent: `${k}: ` }), document.createTextNode(v));
    return row;
  });
}
