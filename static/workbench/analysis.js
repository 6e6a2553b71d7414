// Numbers the listening-QA workbench shows: how abrupt each chunk boundary is, and how far two
// renders of a take (the stream and its offline decode, or two takes) are apart. Pure functions
// on Int16Array samples, so Node can run them as the page does.

// A boundary is flagged when its jump is this many times the typical step around it: speech (and
// any smooth signal) moves little from one sample to the next, so a patch that starts off where
// the last one ended stands out. For Gaussian-like steps, 6x the mean |step| is about 5 sigma.
export const FLAG_THRESHOLD = 6;
const NEIGHBOURHOOD_S = 0.01; // either side of a boundary, the audio whose steps set the typical step

// For each chunk boundary (its first sample, as its metadata frame said: {offset, pause}), the
// sample jump across it relative to the mean absolute step in the neighbourhood on both sides.
// A boundary with a pause's chunk on either side is not scored: that chunk is the exact silence a
// pause tag asked for, so speech stopping dead into it (or starting out of it) is no click.
export function boundaryScores(pcm, boundaries, rate, threshold = FLAG_THRESHOLD) {
  const reach = Math.round(NEIGHBOURHOOD_S * rate);
  const out = [];
  boundaries.forEach((b, i) => {
    const offset = b.offset;
    if (offset <= 0 || offset >= pcm.length || b.pause || boundaries[i - 1]?.pause) return;
    out.push(scoreAt(pcm, offset, reach, threshold));
  });
  return out;
}

function scoreAt(pcm, offset, reach, threshold) {
  const jump = Math.abs(pcm[offset] - pcm[offset - 1]);
  let sum = 0;
  let n = 0;
  const lo = Math.max(1, offset - reach);
  const hi = Math.min(pcm.length - 1, offset + reach);
  for (let i = lo; i <= hi; i++) {
    if (i === offset) continue; // the step being judged does not judge itself
    sum += Math.abs(pcm[i] - pcm[i - 1]);
    n += 1;
  }
  const typical = n ? sum / n : 0;
  const score = jump / Math.max(typical, 1); // one int16 step: silence does not divide by zero
  return { offset, jump, typical: Math.round(typical * 10) / 10, score: Math.round(score * 100) / 100,
    flagged: score > threshold };
}

// Max absolute difference (int16 steps and full scale) and the SNR of `a` against the reference
// `b`, over the samples both hold; lengths are reported, since a missing tail is a difference too.
export function difference(a, b) {
  const n = Math.min(a.length, b.length);
  let maxAbs = 0;
  let signal = 0;
  let noise = 0;
  for (let i = 0; i < n; i++) {
    const d = a[i] - b[i];
    maxAbs = Math.max(maxAbs, Math.abs(d));
    signal += b[i] * b[i];
    noise += d * d;
  }
  const snrDb = noise === 0 ? Infinity : 10 * Math.log10(signal / noise);
  return { compared: n, lengthA: a.length, lengthB: b.length, maxAbs, maxAbsFs: maxAbs / 32767, snrDb };
}

export function describeDifference(d) {
  const snr = isFinite(d.snrDb) ? `${d.snrDb.toFixed(1)} dB` : '∞ dB (identical)';
  const lengths = d.lengthA === d.lengthB ? '' : ` (lengths differ: ${d.lengthA} vs ${d.lengthB} samples)`;
  return `max |A−B| ${d.maxAbs} steps (${percent(d.maxAbsFs)} % of full scale), SNR ${snr}${lengths}`;
}

// A share of full scale in percent, to two significant digits and never in e-notation.
function percent(fraction) {
  const p = fraction * 100;
  return p === 0 ? '0' : p >= 10 ? p.toFixed(0) : p.toFixed(Math.min(6, 1 - Math.floor(Math.log10(p))));
}

// The per-boundary list: each scored boundary with its time, marked bad above `threshold` (the
// list's own, adjustable: the take keeps its flags at FLAG_THRESHOLD), sorted by `key` ('ms' or
// 'score') in `dir` ('asc' or 'desc'); ties keep time order.
export function boundaryRows(scores, rate, threshold = FLAG_THRESHOLD, key = 'ms', dir = 'asc') {
  const rows = scores.map((s, i) => ({ index: i + 1, offset: s.offset, ms: (s.offset / rate) * 1000, score: s.score,
    jump: s.jump, typical: s.typical, bad: s.score > threshold }));
  const sign = dir === 'desc' ? -1 : 1;
  return rows.sort((x, y) => sign * (x[key] - y[key]) || x.offset - y.offset);
}
