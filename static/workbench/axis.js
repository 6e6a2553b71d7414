// The time axis's ticks and labels at a scale: labels on the model's patch grid (where chunk
// boundaries fall), as close as they can be without running into each other. A label every patch
// at any zoom put "0.16", "0.32"... 16 px apart at 100 px/s, written over one another.
// Pure, so Node runs it as the page does.

const LABEL_PX = 60; // the widest label ("599.84", 10 px type, 3 px indent) with room to spare
const TICK_PX = 6; // ticks closer than this read as a grey bar
const STEPS = [1, 2, 5, 10, 25, 50, 125, 250, 500, 1250]; // patches between labels (0.16 s to 200 s at 160 ms)

// Seconds between labels, between ticks, and between the darker (primary) labels, at `px` pixels
// per second for a patch of `patch` seconds.
export function axisTicks(px, patch) {
  const k = STEPS.find((n) => n * patch * px >= LABEL_PX) ?? STEPS.at(-1);
  const label = k * patch;
  const tick = [label / 4, label / 2].find((t) => t * px >= TICK_PX) ?? label;
  return { timeInterval: tick, secondaryLabelInterval: label, primaryLabelInterval: 2 * label };
}

// A label's text: seconds, to the hundredth the patch grid needs (the plugin's own wrote minutes
// past 60 s rounded to the second, which put "1:02" on a label at 61.6 s).
export function axisLabel(seconds) {
  return String(Math.round(seconds * 100) / 100);
}
