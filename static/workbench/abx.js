// Blind ABX: X is A or B at random, and A, B and X play through an audio element of their own, so
// neither waveform's cursor nor the readout says which side X is. A session is a set number of
// trials; its answers are kept (with the take) and scored only once it ends, with the chance of
// doing as well by guessing. The panel around it is Compare's (static/workbench/compare.js).

import { wavBlob } from '../player/pcm.js';
import { matchedClips } from './matched.js';

// P(at least `right` of `n` correct by guessing): the one-sided binomial tail at p = 1/2.
export function binomialP(right, n) {
  let tail = 0;
  let c = 1; // C(n, k), built up as k goes
  for (let k = 0; k <= n; k++) {
    if (k >= right) tail += c;
    c = (c * (n - k)) / (k + 1);
  }
  return tail / 2 ** n;
}

export function describeScore(trials) {
  if (!trials.length) return 'ABX: no trials yet';
  const right = trials.filter((t) => t.correct).length;
  const p = binomialP(right, trials.length);
  return `ABX: ${right} of ${trials.length} correct, p = ${p < 0.001 ? p.toExponential(1) : p.toFixed(3)}` +
    (p < 0.05 ? ' (A and B told apart)' : ' (no better than guessing at p < 0.05)');
}

export class Abx {
  constructor() {
    this.audio = new Audio();
    this.sides = null; // {a, b, rate}: Int16Array samples, while a B is loaded
    this.clips = null; // what plays: matchedClips() of the region last asked for
    this.urls = null; // side -> WAV URL of this.clips
    this.session = null; // {trials, x, answers, clips}
    this.side = null;
  }

  // a, b: Int16Array samples (b null: nothing to compare with).
  load(a, b, rate) {
    this.stop();
    this.sides = b ? { a, b, rate } : null;
    this.cut(null);
    this.session = null;
  }

  ready() {
    return Boolean(this.sides);
  }

  // The clips of samples [from, to): cut, matched and made playable once per region asked for.
  cut(region) {
    const key = region && region.join(':');
    if (region && this.clips?.key === key) return this.clips;
    if (this.urls) {
      // The element lets go of a URL before it is revoked: one still held is fetched again, and fails, for seconds.
      if (Object.values(this.urls).includes(this.audio.src)) { this.audio.removeAttribute('src'); this.audio.load(); }
      Object.values(this.urls).forEach((u) => URL.revokeObjectURL(u));
    }
    this.clips = null;
    this.urls = null;
    if (!region || !this.sides) return null;
    const { a, b, rate } = this.sides;
    this.clips = { ...matchedClips(a, b, rate, region[0], region[1]), key, region };
    this.urls = { A: URL.createObjectURL(wavBlob([this.clips.a], rate)), B: URL.createObjectURL(wavBlob([this.clips.b], rate)) };
    return this.clips;
  }

  // A session keeps the region it started with: every trial plays the same clips.
  start(trials, region) {
    this.session = { trials, x: pick(), answers: [], clips: this.cut(region), region };
  }

  play(which, region) {
    const side = which === 'X' ? this.session?.x : which;
    if (!side || !this.sides) return false;
    if (!this.session) this.cut(region);
    else if (this.clips !== this.session.clips) this.session.clips = this.cut(this.session.clips.region);
    this.audio.src = this.urls[side];
    this.side = which;
    this.audio.play().catch(() => {});
    return true;
  }

  // What is playing as the listener knows it ('A', 'B' or 'X'), or null.
  playing() {
    return this.audio.paused ? null : this.side;
  }

  stop() {
    this.audio.pause();
  }

  // The answer to the running trial; returns the session's trials once the last is answered.
  answer(answer, extra) {
    const s = this.session;
    this.stop();
    s.answers.push({ x: s.x, answer, correct: answer === s.x, at: new Date().toISOString(), ...extra });
    s.x = pick();
    if (s.answers.length < s.trials) return null;
    this.session = null;
    return s.answers;
  }
}

function pick() {
  return Math.random() < 0.5 ? 'A' : 'B';
}
