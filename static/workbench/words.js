// A take's words on a track under its waveform (issue 47), and its subtitles. The words come from
// the stream where the take asked for word timestamps (kept with the take, static/workbench/takes.js),
// else from "Words", which sends the take as the evaluation does (takeForm) to POST /voxcpm/align;
// they are kept with the take either way, so they survive a reload and travel in its bundle.
// Each word is a box from its start to its end on the waveform's time axis: its label is drawn where
// it fits the box at the zoom shown and is otherwise only in its tooltip, so close words never pile
// up; a click (or Enter) plays from the word's start. Words the evaluation found misread or missing
// are marked on the same track. SRT and WebVTT are the same route's ?format=srt / ?format=vtt.

import { moveAmong, takeForm } from './evaluate.js';
import { fileName } from './export.js';
import { errorText, route } from '../player/server.js';

const LABEL_PAD_PX = 6; // a label's room in its box: padding and the box's left line

// The text as the server scores it (inference/analysis/scores.py clean()): NFKC, lower case,
// apostrophes as one, punctuation and symbols dropped; so a word of the text meets its scored unit.
const scored = (text) => text.normalize('NFKC').toLowerCase().replace(/[’‘`´]/g, "'").replace(/[^\p{L}\p{M}\p{N}']/gu, '');

// For each word, what the evaluation said of it ({type, heard}) or null: the evaluation's units of
// the text (every segment's, in order; inserted words are not the text's) are walked beside the
// words, a word meeting the next unit of its own text within a few (a unit the aligner has no word
// for, such as a number normalized differently, is stepped over).
export function verdicts(words, evaluation) {
  const units = (evaluation?.segments || []).flatMap((seg) => seg.intelligibility?.words || []).filter((u) => u.type !== 'inserted');
  let next = 0;
  return words.map((w) => {
    const text = scored(w.word);
    for (let k = next; text && k < Math.min(units.length, next + 4); k++) {
      if (scored(units[k].ref || '') !== text) continue;
      next = k + 1;
      return units[k].type === 'ok' ? null : { type: units[k].type, heard: units[k].heard };
    }
    return null;
  });
}

const ms = (s) => `${Math.round(s * 1000)} ms`;

function said(word, verdict) {
  const times = `${ms(word.start_s)}–${ms(word.end_s)}`;
  if (!verdict) return `${word.word} (${times})`;
  return `${word.word} (${times}): ${verdict.type === 'misread' ? `misread, heard “${verdict.heard}”` : 'not heard'}`;
}

export class Words {
  constructor(wb) {
    this.wb = wb;
    this.view = wb.view;
    this.track = wb.el('words');
    this.take = null;
    this.boxes = []; // {button, from, to, label}: each word's box in seconds and its label's width in px
    this.view.onScale.push((px) => this.layout(px));
    const on = (name, fn) => wb.el(name).addEventListener('click', () => this.busy(name, fn));
    on('words-run', () => this.align());
    on('words-srt', () => this.subtitles('srt'));
    on('words-vtt', () => this.subtitles('vtt'));
    this.track.addEventListener('click', (e) => this.play(e.target.closest('[data-start]')));
    this.track.addEventListener('keydown', (e) => this.moveInWords(e));
  }

  say(text) {
    this.wb.el('words-status').textContent = text;
  }

  // One request at a time per button, its failure said beside them (a busy analysis queue with when
  // to try again).
  async busy(name, fn) {
    const button = this.wb.el(name);
    button.disabled = true;
    try {
      await fn();
    } catch (err) {
      this.say(String(err.message || err));
    } finally {
      button.disabled = false;
    }
  }

  show(take) {
    this.take = take;
    this.say(take.words?.errors?.length ? `The stream sent no words for ${take.words.errors.map((e) =>
      (e.segment == null ? 'the take' : `segment ${e.segment + 1}`)).join(', ')}: “Words” aligns the whole take.` : '');
    this.wb.el('words-run').textContent = take.words?.list?.length ? 'Words again (align the text to the audio)'
      : 'Words (align the text to the audio)';
    this.draw();
  }

  // The words' boxes, placed in percent of the take's length (the track's inner strip is drawn as
  // wide as the waveform and scrolls with it: WaveView.follow), then sized at the current zoom.
  draw() {
    const take = this.take;
    const words = take?.words?.list || [];
    const seconds = take ? new Int16Array(take.pcm).length / take.sampleRate : 0;
    this.track.hidden = !words.length || !seconds;
    if (this.track.hidden) {
      this.boxes = [];
      return this.track.replaceChildren();
    }
    const strip = document.createElement('div');
    strip.className = 'vox-wb-words-strip';
    const marks = verdicts(words, take.evaluation);
    this.boxes = words.map((w, i) => {
      const to = Math.min(w.end_s, words[i + 1]?.start_s ?? Infinity, seconds); // never over the next word's box
      const button = document.createElement('button');
      button.type = 'button';
      button.className = 'vox-wb-word';
      button.tabIndex = i ? -1 : 0; // one Tab stop: the arrow keys move between the words
      Object.assign(button.dataset, { start: w.start_s, end: w.end_s, index: i });
      if (marks[i]) button.dataset.eval = marks[i].type;
      button.title = said(w, marks[i]);
      button.setAttribute('aria-label', button.title);
      button.style.left = `${(w.start_s / seconds) * 100}%`;
      button.style.width = `${(Math.max(0, to - w.start_s) / seconds) * 100}%`;
      const label = document.createElement('span');
      label.textContent = w.word;
      button.append(label);
      strip.append(button);
      return { button, label, from: w.start_s, to };
    });
    this.track.replaceChildren(strip);
    this.boxes.forEach((b) => { b.width = b.label.offsetWidth; }); // read once, all together: one layout
    this.layout(this.view.pxPerSec());
    this.view.follow(this.view.a.getScroll());
  }

  // At `px` pixels per second: a label is shown only where it fits its word's box.
  layout(px) {
    for (const b of this.boxes) b.button.dataset.fit = String(b.width + LABEL_PAD_PX <= (b.to - b.from) * px);
  }

  play(button) {
    if (!button) return;
    this.view.seek(Number(button.dataset.start) + 1e-4); // just inside the word
    this.view.current().play();
  }

  moveInWords(e) {
    moveAmong(this.boxes.map((b) => b.button), e);
  }

  // The take's words from the server's aligner, kept with the take.
  async align() {
    const take = this.take;
    if (!take) return;
    this.say('Aligning the text to the audio (the server\'s recognizer, between patches of any live stream)…');
    const response = await fetch(route('align'), { method: 'POST', body: takeForm(take, false) });
    if (!response.ok) throw new Error(await refusal(response));
    const body = await response.json();
    await this.wb.save(take, { words: { source: 'align', list: body.words || [], errors: [] } });
    if (this.take !== take) return;
    this.show(take);
    this.say(`${body.words.length} words aligned${body.elapsed_s != null ? ` in ${body.elapsed_s.toFixed(1)} s` : ''}.`);
  }

  // The subtitle file of the take, as the server writes it, saved under the take's file name.
  async subtitles(format) {
    const take = this.take;
    if (!take) return;
    const url = route('align');
    url.searchParams.set('format', format);
    this.say(`Making the ${format === 'srt' ? 'SRT' : 'WebVTT'} subtitles…`);
    const response = await fetch(url, { method: 'POST', body: takeForm(take, false) });
    if (!response.ok) throw new Error(await refusal(response));
    const name = fileName(take, `.${format}`);
    this.wb.download(await response.blob(), name);
    this.say(`Saved ${name}.`);
  }
}

// What a refusal says: the server's reason, and when a full analysis queue asks to come back.
async function refusal(response) {
  const retry = response.status === 503 && response.headers.get('Retry-After');
  return `${await errorText(response)}${retry ? ` (the server asks to try again in ${retry} s)` : ''}`;
}
