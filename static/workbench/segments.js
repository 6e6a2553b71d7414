// A long text's segments under the waveform: each one's text as spoken, with its pauses between them
// (where their silence fell, from the chunks' metadata), the one being heard marked as the cursor
// moves (playing or seeking), and a click on one (or Enter) seeks to its start.

import { pauseLabel, pauseSpans } from '../player/panel.js';

export class Segments {
  constructor(list, view) {
    this.list = list;
    this.view = view;
    this.starts = [];
    view.onTime.push((seconds) => this.follow(seconds));
    list.addEventListener('click', (e) => this.seek(e.target.closest('[data-sample]')));
    list.addEventListener('keydown', (e) => {
      if (e.key === 'Enter') this.seek(e.target.closest('[data-sample]'));
      else this.move(e);
    });
  }

  show(take) {
    const s = take.segments;
    this.rate = take.sampleRate;
    this.starts = s ? [0, ...s.ends.slice(0, -1)] : [];
    this.list.hidden = !s;
    const spans = pauseSpans(take.boundaries || [], take.sampleRate);
    const pauses = s?.pauses || [];
    const items = [];
    (s ? s.texts : []).concat([null]).forEach((text, i) => {
      pauses.forEach((p, j) => { if (p.before === i) items.push(this.pause(p, spans[j])); });
      if (text !== null) items.push(this.item(text.trim(), this.starts[i], `Segment ${i + 1}`, { segment: i }));
    });
    items.forEach((li, i) => { li.tabIndex = i ? -1 : 0; }); // one Tab stop, however many segments and pauses
    this.list.replaceChildren(...items);
    this.follow(0);
  }

  // The arrow keys (Home, End) move the focus, and the list's one Tab stop, between its items: a
  // Tab stop each made a long text's list of segments and pauses dozens of presses long (issue 58).
  move(e) {
    const items = [...this.list.children];
    const i = items.indexOf(e.target);
    const to = { ArrowDown: i + 1, ArrowRight: i + 1, ArrowUp: i - 1, ArrowLeft: i - 1, Home: 0, End: items.length - 1 }[e.key];
    if (i < 0 || to === undefined || !items[to]) return;
    e.preventDefault();
    items.forEach((li, j) => { li.tabIndex = j === to ? 0 : -1; });
    items[to].focus();
  }

  item(text, sample, title, data) {
    const li = document.createElement('li');
    Object.assign(li.dataset, data);
    if (data.segment != null) li.value = data.segment + 1; // numbered as segments, the pauses between left out
    if (sample != null) li.dataset.sample = sample;
    li.textContent = text;
    li.title = sample == null ? title : `${title}: from ${(sample / this.rate * 1000).toFixed(0)} ms`;
    return li;
  }

  // A pause as the text asked for it; its silence's place once the stream got there.
  pause(p, span) {
    const li = this.item(`⏸ ${span ? pauseLabel(span) : `pause ${Math.round(p.ms)} ms`}`, span?.start,
      `${p.tag.trim()}: silence`, { pause: p.before });
    li.className = 'vox-wb-pause';
    return li;
  }

  // The segment under the cursor: the last one starting at or before it.
  follow(seconds) {
    const sample = seconds * this.rate;
    let now = -1;
    this.starts.forEach((start, i) => { if (start <= sample) now = i; });
    for (const li of this.list.children) {
      if (li.dataset.segment != null && Number(li.dataset.segment) === now) li.setAttribute('aria-current', 'true');
      else li.removeAttribute('aria-current');
    }
  }

  seek(li) {
    if (!li) return;
    this.view.seek(Number(li.dataset.sample) / this.rate + 1e-4); // just inside it
  }
}
