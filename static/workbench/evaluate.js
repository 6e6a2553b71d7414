// The take's evaluation, as TTS papers report it (POST /voxcpm/evaluate, docs/listening-qa.md): the
// word error rate (character error rate for Chinese) of the server's transcript against the text as
// spoken, and for a cloning take the speaker similarity to its clip; per segment for a long text.
// Misread, missing and inserted words are marked in the text and on the waveform at the times the
// recognizer gave them; a click (or Enter) on one jumps there. The scores are kept with the take.
// On the waveform a word is a coloured line and one sign (≠ − +), its words in a tooltip: whole
// words as labels piled up in rows down over the waveform where errors came close together. In
// the text the marked words are one Tab stop, the arrow keys moving between them.

import { wavBlob } from '../player/pcm.js';
import { route } from '../player/server.js';

// Left and Right (Home, End) on one of `words` (buttons of one row, one Tab stop among them): the
// focus, and the Tab stop, to the next one. The scored words and the words track both move so.
export function moveAmong(words, e) {
  const i = words.indexOf(e.target);
  const to = { ArrowRight: i + 1, ArrowLeft: i - 1, Home: 0, End: words.length - 1 }[e.key];
  if (i < 0 || to === undefined || !words[to]) return;
  e.preventDefault();
  words.forEach((w, j) => { w.tabIndex = j === to ? 0 : -1; });
  words[to].focus();
}

const COLORS = { misread: '#d97706', missing: '#dc2626', inserted: '#2563eb' };
const SAYS = { misread: 'misread', missing: 'missing', inserted: 'inserted' };
const SIGNS = { misread: '≠', missing: '−', inserted: '+' };

const pct = (rate) => `${(rate * 100).toFixed(1)}%`;

// What a take's row in the list shows of its scores ('' before it is scored).
export function rowScores(take) {
  const e = take.evaluation;
  if (!e) return '';
  const w = e.intelligibility;
  const s = e.similarity;
  return [w?.available ? `${w.metric.toUpperCase()} ${pct(w.rate)}` : '', s?.available ? `SIM ${s.score.toFixed(2)}` : '']
    .filter(Boolean).map((x) => ` · ${x}`).join('');
}

// The take's audio, its text as spoken (by segment for a long text) and, asked for, its clip: the
// form POST /voxcpm/evaluate reads, and POST /voxcpm/align (word timestamps, subtitles) the same.
export function takeForm(take, withClip) {
  const s = take.settings;
  const form = new FormData();
  form.append('file', wavBlob([new Int16Array(take.pcm)], take.sampleRate), 'take.wav');
  const seg = take.segments;
  if (seg && seg.texts.length > 1 && seg.ends.length === seg.texts.length) {
    form.append('segments', JSON.stringify(seg.texts.map((text, i) => ({ text,
      end_s: i === seg.texts.length - 1 ? null : seg.ends[i] / take.sampleRate }))));
  } else {
    form.append('text', s.text_as_spoken || s.text);
  }
  if (withClip && s.mode !== 'design') {
    if (s.voice) form.append('voice', s.voice);
    else if (s.reference_id) form.append('reference_id', s.reference_id);
  }
  return form;
}

export class Evaluation {
  constructor(wb) {
    this.wb = wb;
    this.el = (name) => wb.el(name);
    this.take = null;
    this.el('eval-run').addEventListener('click', () => this.run().catch((e) => this.say(String(e.message || e))));
    const jump = (e) => {
      const target = e.target.closest('[data-at]');
      if (target && (e.type === 'click' || e.key === 'Enter')) this.wb.view.seek(Number(target.dataset.at) + 1e-4);
    };
    for (const name of ['eval-text', 'eval-segments']) {
      this.el(name).addEventListener('click', jump);
      this.el(name).addEventListener('keydown', jump);
    }
    this.el('eval-text').addEventListener('keydown', (e) => this.moveInWords(e));
  }

  say(text) {
    this.el('eval-status').textContent = text;
  }

  // The take on screen: its kept scores, or a button to make them.
  show(take) {
    this.take = take;
    this.say('');
    this.draw(take.evaluation || null);
  }

  async run() {
    const take = this.take;
    if (!take) return;
    this.el('eval-run').disabled = true;
    this.say('Scoring: the server transcribes the take (and embeds its voice) between two patches of any live stream…');
    try {
      let response = await fetch(route('evaluate'), { method: 'POST', body: takeForm(take, true) });
      let note = '';
      if (response.status === 400 && take.settings.reference_id && !take.settings.voice) {
        const why = (await response.clone().json()).error || '';
        if (/expired|never uploaded/.test(why)) { // the clip is kept 30 minutes: the words can still be scored
          note = ' The take\'s clip is no longer on the server (upload it again to score the similarity).';
          response = await fetch(route('evaluate'), { method: 'POST', body: takeForm(take, false) });
        }
      }
      const body = await response.json();
      if (!response.ok) throw new Error(body.error || `the server answered ${response.status}`);
      body.note = note;
      await this.wb.save(take, { evaluation: body });
      this.wb.render();
      if (this.take === take) {
        this.draw(body);
        this.wb.words.show(take); // its misread words marked on the words track too
      }
      this.say(`Scored in ${body.elapsed_s.toFixed(1)} s.${note}`);
    } finally {
      this.el('eval-run').disabled = false;
    }
  }

  draw(result) {
    const view = this.wb.view;
    view.unmark('e-');
    this.el('eval-summary').replaceChildren();
    this.el('eval-text').replaceChildren();
    this.el('eval-segments').replaceChildren();
    this.el('eval-segments').hidden = true;
    this.el('eval-run').textContent = result ? 'Score again' : 'Score this take (WER, speaker similarity)';
    if (!result) return;
    this.el('eval-summary').textContent = summaryOf(result);
    const marks = [];
    const texts = result.segments.map((seg) => this.markedText(seg, marks));
    this.el('eval-text').replaceChildren(...texts);
    const words = this.el('eval-text').querySelectorAll('button[data-at]');
    words.forEach((w, i) => { w.tabIndex = i ? -1 : 0; });
    marks.forEach((m, i) => view.mark({ id: `e-${i}`, sample: m.at * view.rate, color: COLORS[m.type], label: SIGNS[m.type],
      title: m.type === 'misread' ? `“${m.ref}” heard as “${m.heard}”` : m.type === 'missing' ? `“${m.ref}” not heard` : `“${m.heard}” heard, not in the text` }));
    if (result.segments.length > 1) this.segmentTable(result.segments);
  }

  moveInWords(e) {
    moveAmong([...this.el('eval-text').querySelectorAll('button[data-at]')], e);
  }

  // A segment's text as spoken, its misread and missing words marked where they stand and the
  // inserted ones put in where they were heard; each mark jumps to its time.
  markedText(seg, marks) {
    const p = document.createElement('p');
    p.className = 'vox-eval-text';
    const words = seg.intelligibility?.words;
    if (!words) {
      p.textContent = seg.text;
      return p;
    }
    let at = 0;
    const sorted = words.map((w, i) => ({ ...w, i })).filter((w) => w.span)
      .sort((a, b) => a.span[0] - b.span[0] || a.i - b.i);
    for (const w of sorted) {
      if (w.type === 'ok') continue;
      const [from, to] = w.span;
      if (from < at) continue; // a word already marked (a Chinese character's unit shares nothing else)
      p.append(seg.text.slice(at, from));
      const mark = document.createElement(w.start == null ? 'span' : 'button');
      mark.type = 'button';
      mark.className = `vox-eval-word vox-eval-${w.type}`;
      mark.dataset.type = w.type;
      mark.textContent = w.type === 'inserted' ? `+${w.heard}` : seg.text.slice(from, to);
      mark.title = w.type === 'misread' ? `heard “${w.heard}”` : w.type === 'missing' ? 'not heard' : 'heard, not in the text';
      if (w.start != null) {
        mark.dataset.at = w.start;
        mark.title += ` at ${(w.start * 1000).toFixed(0)} ms`;
        marks.push({ type: w.type, at: w.start, heard: w.heard, ref: w.ref });
      }
      mark.setAttribute('aria-label', `${SAYS[w.type]}: ${mark.textContent}, ${mark.title}`);
      p.append(mark);
      if (w.type !== 'inserted') at = to;
      else if (from > at) at = from;
    }
    p.append(seg.text.slice(at));
    return p;
  }

  segmentTable(segments) {
    const table = this.el('eval-segments');
    const head = document.createElement('tr');
    for (const h of ['Segment', 'From', 'Error rate', 'Similarity', 'Heard']) head.append(Object.assign(document.createElement('th'), { textContent: h }));
    const rows = segments.map((seg) => {
      const tr = document.createElement('tr');
      tr.dataset.at = seg.start_s;
      tr.tabIndex = 0;
      const w = seg.intelligibility;
      const cells = [`§${seg.index + 1}`, `${(seg.start_s * 1000).toFixed(0)} ms`,
        w ? `${w.metric.toUpperCase()} ${pct(w.rate)} (${w.substitutions} misread, ${w.deletions} missing, ${w.insertions} inserted)` : '–',
        seg.similarity == null ? '–' : seg.similarity.toFixed(3), w ? w.transcript : '–'];
      for (const c of cells) tr.append(Object.assign(document.createElement('td'), { textContent: c }));
      return tr;
    });
    table.replaceChildren(head, ...rows);
    table.hidden = false;
  }
}

function summaryOf(result) {
  const w = result.intelligibility;
  const s = result.similarity;
  const words = w.available
    ? `${w.metric.toUpperCase()} ${pct(w.rate)}: ${w.substitutions} misread, ${w.deletions} missing, ${w.insertions} inserted ` +
      `of ${w.reference_units} ${w.metric === 'cer' ? 'characters' : 'words'} (${w.model}, ${w.language})`
    : `Error rate not available: ${w.reason}`;
  const voice = s == null ? 'Speaker similarity: not a cloning take (no clip to compare with).'
    : s.available ? `Speaker similarity ${s.score.toFixed(3)} to the clip (cosine, ${s.model}).`
      : `Speaker similarity not available: ${s.reason}`;
  return `${words}. ${voice}${result.note || ''}`;
}
