// The per-boundary list under the waveform: every scored chunk boundary with its time and score,
// sortable by either, each a click away from the cursor (its time) or from a loop of ±50 ms around
// it; an adjustable threshold marks the bad ones here and in red on the waveform.

import { FLAG_THRESHOLD, boundaryRows } from './analysis.js';

const LOOP_S = 0.05; // either side of a boundary: long enough to hear a click, short enough to hear only it
const FLAGGED = '#c62828'; // as the take's own flags are drawn

export class BoundaryList {
  constructor(wb) {
    this.wb = wb;
    this.el = (name) => wb.el(name);
    this.threshold = FLAG_THRESHOLD; // kept across takes: a listener sets it once for a session
    this.sort = { key: 'ms', dir: 'asc' };
    this.el('blist-threshold').value = String(FLAG_THRESHOLD);
    this.el('blist-threshold').addEventListener('change', (e) => this.setThreshold(e.target.value));
    this.el('blist').addEventListener('click', (e) => this.onClick(e).catch((err) => wb.say(String(err.message || err))));
  }

  setThreshold(value) {
    const v = Number(value);
    if (value === '' || !(v > 0) || v > 1000) {
      this.el('blist-threshold').value = String(this.threshold);
      const why = `The threshold is a number from 0 to 1000 (times the neighbouring sample steps); ` +
        `${FLAG_THRESHOLD} is the default. It stays at ${this.threshold}.`;
      this.el('blist-count').textContent = why; // beside the field, and in the toolbar's message line
      return this.wb.say(why);
    }
    this.threshold = v;
    this.show(this.wb.selected);
  }

  async onClick(e) {
    const sorter = e.target.closest('button[data-sort]');
    if (sorter) {
      const key = sorter.dataset.sort;
      // A new column sorts its most useful way first: the worst score, the earliest time.
      const dir = this.sort.key === key ? (this.sort.dir === 'asc' ? 'desc' : 'asc') : key === 'score' ? 'desc' : 'asc';
      this.sort = { key, dir };
      return this.show(this.wb.selected);
    }
    const button = e.target.closest('button[data-act]');
    if (!button) return;
    const seconds = Number(button.closest('tr').dataset.offset) / this.wb.selected.sampleRate;
    const view = this.wb.view;
    if (button.dataset.act === 'jump') return view.seek(seconds);
    view.stop();
    view.switchTo('A', false);
    view.select(Math.max(0, seconds - LOOP_S), Math.min(view.a.getDuration(), seconds + LOOP_S));
    view.seek(Math.max(0, seconds - LOOP_S));
    this.el('loop').checked = true;
    view.toggle();
  }

  show(take) {
    const box = this.el('blist');
    box.hidden = !take?.scores?.length;
    if (box.hidden) return;
    const rows = boundaryRows(take.scores, take.sampleRate, this.threshold, this.sort.key, this.sort.dir);
    const bad = rows.filter((r) => r.bad).length;
    this.el('blist-count').textContent = `${bad} of ${rows.length} above ${this.threshold}×`;
    for (const th of box.querySelectorAll('th[data-sort-key]')) {
      th.setAttribute('aria-sort', th.dataset.sortKey !== this.sort.key ? 'none' : this.sort.dir === 'asc' ? 'ascending' : 'descending');
    }
    this.el('blist-rows').replaceChildren(...rows.map((r) => row(r)));
    this.mark(take);
  }

  // The waveform's boundary marks at this threshold (the take drew them at the default).
  mark(take) {
    const view = this.wb.view;
    view.unmark('b-');
    take.scores.forEach((s, i) => {
      const bad = s.score > this.threshold;
      view.mark({ id: `b-${i}`, sample: s.offset, color: bad ? FLAGGED : null, label: bad ? `⚠ ${s.score.toFixed(1)}×` : null });
    });
  }
}

function row(r) {
  const tr = document.createElement('tr');
  tr.dataset.offset = r.offset;
  if (r.bad) tr.className = 'vox-wb-bad';
  const cell = (content) => {
    const td = document.createElement('td');
    td.append(content);
    return td;
  };
  const button = (act, text, label) => {
    const b = Object.assign(document.createElement('button'), { type: 'button', className: 'vox-wb-button', textContent: text });
    b.dataset.act = act;
    b.setAttribute('aria-label', label);
    return b;
  };
  tr.append(cell(String(r.index)),
    cell(button('jump', `${r.ms.toFixed(1)} ms`, `Boundary ${r.index}: jump to ${r.ms.toFixed(1)} ms`)),
    cell(`${r.score.toFixed(2)}×${r.bad ? ' ⚠' : ''}`), cell(String(r.jump)),
    cell(button('loop', 'Loop ±50 ms', `Loop 50 ms either side of boundary ${r.index}`)));
  return tr;
}
