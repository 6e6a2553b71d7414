// What blind A/B and ABX play: the same region of A and of B, equally long and at the same loudness,
// so that neither a longer tail nor a louder take can tell X apart; only the sound itself can.
// Pure functions on int16 samples, so Node runs them as the page does.

import { integratedLoudness, kWeighted } from './measures.js';

const FADE_S = 0.005; // each clip fades in and out over 5 ms: a cut mid-waveform clicks, and A's and B's clicks differ
const GATED_S = 0.4; // BS.1770's gated loudness needs one 400 ms block; a shorter region is measured ungated

// Loudness of a region in LUFS: BS.1770 integrated (gated) where the region holds a 400 ms block,
// else the K-weighted mean power of the whole region (a ±50 ms loop around a boundary is 100 ms).
// -Infinity for digital silence.
export function regionLoudness(pcm, rate) {
  if (pcm.length >= GATED_S * rate) {
    const gated = integratedLoudness(pcm, rate);
    if (isFinite(gated)) return gated;
  }
  const y = kWeighted(pcm, rate);
  let sum = 0;
  for (let i = 0; i < y.length; i++) sum += y[i] * y[i];
  return sum > 0 ? -0.691 + 10 * Math.log10(sum / y.length) : -Infinity;
}

// A's and B's clips for blind listening: samples [from, to) of both, clamped to the shorter of the
// two (no selection: all that both hold), each faded in and out, the louder one turned down to the
// quieter one's loudness (down, never up: a gain above 1 could clip). Returns the clips and what
// was done to them, for the page to say and the answers to record.
export function matchedClips(a, b, rate, from = 0, to = Infinity) {
  const end = Math.min(a.length, b.length, Math.round(to));
  const start = Math.max(0, Math.min(Math.round(from), end));
  const cutA = a.subarray(start, end);
  const cutB = b.subarray(start, end);
  const lufsA = regionLoudness(cutA, rate);
  const lufsB = regionLoudness(cutB, rate);
  let gainA = 0;
  let gainB = 0; // dB
  if (isFinite(lufsA) && isFinite(lufsB)) {
    if (lufsA > lufsB) gainA = lufsB - lufsA;
    else gainB = lufsA - lufsB;
  }
  return { from: start, to: end, rate, lufsA, lufsB, gainA, gainB,
    a: shaped(cutA, gainA, rate), b: shaped(cutB, gainB, rate) };
}

function shaped(pcm, gainDb, rate) {
  const g = 10 ** (gainDb / 20);
  const fade = Math.min(Math.round(FADE_S * rate), Math.floor(pcm.length / 2));
  const out = new Int16Array(pcm.length);
  for (let i = 0; i < pcm.length; i++) {
    const edge = Math.min(i, pcm.length - 1 - i);
    const w = edge < fade ? 0.5 - 0.5 * Math.cos((Math.PI * (edge + 0.5)) / fade) : 1;
    out[i] = Math.max(-32768, Math.min(32767, Math.round(pcm[i] * g * w)));
  }
  return out;
}

export function describeClips(c) {
  const ms = (n) => ((n / c.rate) * 1000).toFixed(1);
  const db = (v) => (isFinite(v) ? `${v.toFixed(1)} LUFS` : 'silent');
  const turned = c.gainA < 0 ? `A turned down ${(-c.gainA).toFixed(1)} dB` : c.gainB < 0
    ? `B turned down ${(-c.gainB).toFixed(1)} dB` : 'no level change needed';
  return `A, B and X play ${ms(c.from)}–${ms(c.to)} ms of both (A ${db(c.lufsA)}, B ${db(c.lufsB)}: ${turned})`;
}
