// Runs static/player/pcm-worklet.js outside a browser, block by block, so tests can read every output
// sample: the AudioWorklet globals are stood in for, then a scenario of pushes and blocks runs.
// Usage: node worklet_harness.mjs <worklet.js> '<scenario JSON>'; prints {blocks, messages}.
import { readFileSync } from 'node:fs';
import vm from 'node:vm';

const [workletPath, scenarioJson] = process.argv.slice(2);
const messages = [];
let Processor = null;
const context = {
  AudioWorkletProcessor: class {
    constructor() { this.port = { postMessage: (m) => messages.push(m), onmessage: null }; }
  },
  registerProcessor: (name, cls) => { Processor = cls; },
  currentFrame: 0,
  Float32Array, Math, Object,
};
vm.runInNewContext(readFileSync(workletPath, 'utf8'), context);

const options = { processorOptions: { prebufferSamples: 256, fadeSamples: 64, reportEveryQuanta: 1 } };
const player = new Processor(options);
const blocks = [];
for (const step of JSON.parse(scenarioJson)) {
  if (step.push !== undefined) player.port.onmessage({ data: { type: 'push', samples: new Float32Array(step.push).fill(step.value ?? 0.5) } });
  if (step.end) player.port.onmessage({ data: { type: 'end' } });
  if (step.reset) player.port.onmessage({ data: { type: 'reset', id: step.reset } });
  for (let i = 0; i < (step.blocks ?? 0); i++) {
    const out = new Float32Array(128);
    player.process([], [[out]]);
    context.currentFrame += 128;
    blocks.push(Array.from(out));
  }
}
console.log(JSON.stringify({ blocks, messages }));
