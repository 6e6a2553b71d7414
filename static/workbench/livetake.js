// A live take in the workbench (its record: static/player/liverecord.js): the mark its row and facts
// carry, and the facts it adds above the waveform: how its text came, its first audio counted from
// the first clause's commit, and each clause's timings with the seam before it.

import { counted } from '../player/panel.js';
import { deliveryOf } from './takes.js';

export const isLive = (take) => deliveryOf(take) === 'live';

const secs = (ms) => (ms == null ? '–' : `${(ms / 1000).toFixed(2)} s`);
const msSaid = (ms) => (ms == null || !isFinite(ms) ? '–' : `${Math.round(ms)} ms`);

function source(live) {
  if (live.source === 'replay') return `replayed at ${live.rate} tokens/s`;
  if (live.source === 'reuse') return 'an earlier live take replayed at the pace it was typed';
  return 'typed in the Live text box';
}

// The seam before a clause, as heard: a gap within a patch of where its audio begins, or none.
function seamSaid(gapMs) {
  if (gapMs === null) return 'a gap still going when the take stopped';
  return gapMs ? `${Math.round(gapMs)} ms gap` : 'no gap';
}

function clauseLine(c, k, rate) {
  const waited = c.audio_ms == null || c.committed_ms == null ? '' : ` (${msSaid(c.audio_ms - c.committed_ms)} later)`;
  const where = c.heard ? `, at ${(c.at_samples / rate).toFixed(3)} s of the take` : ' (none of it in the take: stopped first)';
  const seam = k ? `; seam before it: ${seamSaid(c.seam_gap_ms)}` : '';
  return `“${c.text.trim()}” committed at ${secs(c.committed_ms)}, its audio from ${secs(c.audio_ms)}${waited}${where}${seam}`;
}

// The facts a live take adds: [label, text or nodes] rows, as the workbench's summary draws them.
export function liveFacts(t) {
  const live = t.live;
  if (!live) return [['Live text', 'yes (kept before live takes recorded their clauses)']];
  const seams = live.clauses.slice(1);
  const gapped = seams.filter((c) => c.seam_gap_ms !== 0).length;
  const f = t.figures;
  const list = document.createElement('ol');
  list.className = 'vox-wb-clauses';
  list.append(...live.clauses.map((c, k) => Object.assign(document.createElement('li'), { textContent: clauseLine(c, k, t.sampleRate) })));
  return [
    ['Live text', `${source(live)}; ${counted(live.clauses.length, 'clause')}, the first complete ${secs(live.first_commit_ms)} ` +
      `after the session opened; from its commit, first byte ${msSaid(f.first_byte_ms)}, first sound ${msSaid(f.first_sound_ms)}; ` +
      `${counted(seams.length, 'seam')} between clauses, ${gapped} with a gap`],
    ['Clauses (times from the first clause\'s commit)', list],
  ];
}
