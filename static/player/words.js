// The take's words as they play (issue 47): the words the stream's "words" frames carried, shown
// in the player's panel with the one being spoken highlighted. The clock is the player's own, the
// samples the worklet has played (what the panel's Audio figure counts): a word's times are seconds
// of the audio sent, and an underrun stops that count with the sound, so the highlight never runs
// ahead of what is heard. A segment's words come once it is made and aligned: where its audio has
// played by then (a player that ran dry, or a short prebuffer), they can no longer light up as it
// plays; the note under them says so, and the replay below the panel lights every word on its own
// clock. The markup is ui/page/panel.py's (data-field="words").

// The word being spoken at `seconds`: the last one started by then, while it lasts; between two
// words none is (-1), and `spoken` is how many have started.
export function wordAt(words, seconds) {
  let lo = 0;
  let hi = words.length;
  while (lo < hi) { // the first word starting after `seconds`
    const mid = (lo + hi) >> 1;
    if (words[mid].start_s <= seconds) lo = mid + 1;
    else hi = mid;
  }
  const last = lo - 1;
  return { now: last >= 0 && seconds < words[last].end_s ? last : -1, spoken: lo };
}

// What the note under the words says of the segments the server could not align (never a reason
// to stop the audio: the words are only shown).
export function wordsNote(errors) {
  return errors.map((e) => (e.segment == null ? `No words: ${e.error}.` : `No words for segment ${e.segment + 1}: ${e.error}.`)).join(' ');
}

// The note's words for `late` words that came after their audio had played.
export function lateNote(late) {
  if (!late) return '';
  return `${late === 1 ? '1 word' : `${late} words`} came after ${late === 1 ? 'its' : 'their'} audio had played, ` +
    'so did not light up: the replay below lights every word.';
}

export class WordsLine {
  constructor(panel) {
    this.panel = panel;
    this.drawn = 0; // words of the run already in the box
    this.state = null; // the last highlight drawn, "now/spoken"
    this.words = []; // the run's words as drawn, for the replay's clock
    this.known = new Set(); // each word once drawn: whether it came late is decided then
    this.late = 0;
  }

  clear() {
    const box = this.panel.field('words');
    if (box) box.hidden = true;
    this.panel.field('words_text')?.replaceChildren();
    this.panel.set('words_note', '');
    this.drawn = 0;
    this.state = null;
    this.words = [];
    this.known.clear();
    this.late = 0;
  }

  // Cheap on every worklet report: new words are appended, and the highlight moves only when the
  // word under the clock changes.
  update(run) {
    const box = this.panel.field('words');
    if (!box) return;
    box.hidden = run.words == null && !run.wordErrors.length;
    const words = run.words || [];
    const seconds = run.played / run.sampleRate;
    if (words.length !== this.drawn) this.draw(words, seconds);
    this.panel.set('words_note', [wordsNote(run.wordErrors), lateNote(this.late)].filter(Boolean).join(' '));
    this.follow(words, seconds);
  }

  // The replay's audio element (the panel's result box): while it plays, the highlight follows its
  // clock, every animation frame (its timeupdate comes four times a second: words are shorter).
  replayWith(audio) {
    const tick = () => {
      this.follow(this.words, audio.currentTime);
      if (!audio.paused) requestAnimationFrame(tick);
    };
    audio.onplay = audio.onseeked = () => requestAnimationFrame(tick);
  }

  // Segments' words can come in any order, so the line is drawn again from the run's sorted list.
  draw(words, seconds) {
    for (const w of words) {
      if (!this.known.has(w) && w.end_s <= seconds) this.late += 1;
      this.known.add(w);
    }
    this.words = words;
    const text = this.panel.field('words_text');
    text.replaceChildren(...words.map((w, i) => {
      const span = document.createElement('span');
      span.textContent = w.word;
      span.dataset.index = i;
      span.dataset.start = w.start_s;
      span.dataset.end = w.end_s;
      return span;
    }).flatMap((span, i) => (i ? [' ', span] : [span])));
    this.drawn = words.length;
    this.state = null;
  }

  follow(words, seconds) {
    const { now, spoken } = wordAt(words, seconds);
    const state = `${now}/${spoken}`;
    if (state === this.state) return;
    this.state = state;
    const spans = this.panel.field('words_text').children;
    for (let i = 0; i < spans.length; i++) {
      const want = i === now ? 'now' : i < spoken ? 'spoken' : '';
      if ((spans[i].dataset.state || '') === want) continue;
      spans[i].dataset.state = want;
      if (want === 'now') spans[i].setAttribute('aria-current', 'true');
      else spans[i].removeAttribute('aria-current');
    }
    if (now >= 0) keepInView(this.panel.field('words_text'), spans[now]);
  }
}

// The word being spoken stays visible in the box's own scroll, without scrolling the page (the box
// is positioned, app.css: a word's offsetTop is within it).
function keepInView(box, el) {
  const top = el.offsetTop;
  if (top < box.scrollTop || top + el.offsetHeight > box.scrollTop + box.clientHeight) {
    box.scrollTop = Math.max(0, top - box.clientHeight / 3);
  }
}
