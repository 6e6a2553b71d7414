// A long text's segments under the waveform: each one's text as spoken, the one being heard marked
// as the cursor moves (playing or seeking), and a click on one (or Enter) seeks to its start.

export class Segments {
  constructor(list, view) {
    this.list = list;
    this.view = view;
    this.starts = [];
    view.onTime.push((seconds) => this.follow(seconds));
    list.addEventListener('click', (e) => this.seek(e.target.closest('[data-segment]')));
    list.addEventListener('keydown', (e) => { if (e.key === 'Enter') this.seek(e.target.closest('[data-segment]')); });
  }

  show(take) {
    const s = take.segments;
    this.rate = take.sampleRate;
    this.starts = s ? [0, ...s.ends.slice(0, -1)] : [];
    this.list.hidden = !s;
    this.list.replaceChildren(...(s ? s.texts : []).map((text, i) => {
      const li = document.createElement('li');
      li.dataset.segment = i;
      li.tabIndex = 0;
      li.textContent = text.trim();
      li.title = `Segment ${i + 1}: from ${(this.starts[i] / this.rate * 1000).toFixed(0)} ms`;
      return li;
    }));
    this.follow(0);
  }

  // The segment under the cursor: the last one starting at or before it.
  follow(seconds) {
    const sample = seconds * this.rate;
    let now = -1;
    this.starts.forEach((start, i) => { if (start <= sample) now = i; });
    for (const li of this.list.children) {
      if (Number(li.dataset.segment) === now) li.setAttribute('aria-current', 'true');
      else li.removeAttribute('aria-current');
    }
  }

  seek(li) {
    if (!li) return;
    this.view.seek(this.starts[Number(li.dataset.segment)] / this.rate + 1e-4); // just inside it
  }
}
