// Where a stream's pauses fell: the chunks whose metadata frame says `pause` hold the exact silence
// a pause tag asked for ([pause 500ms], <break time="500ms"/>: inference/text/pauses.py). Runs of
// them, in samples of the audio received, as the panel and the workbench show them.

export function pauseSpans(boundaries, rate) {
  const spans = [];
  for (const b of boundaries) {
    if (!b.pause) continue;
    const last = spans[spans.length - 1];
    if (last && last.start + last.samples === b.offset) last.samples += b.samples;
    else spans.push({ start: b.offset, samples: b.samples });
  }
  return spans.map((s) => ({ ...s, ms: Math.round((s.samples / rate) * 1000) }));
}

export const pauseLabel = (span) => `pause ${span.ms} ms`;

// The model's patches among the chunks: a pause's silence is not one.
export const patchCount = (boundaries) => boundaries.filter((b) => !b.pause).length;
