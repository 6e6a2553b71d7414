// Runs static/workbench/measures.js in Node on int16 samples (little-endian) read from stdin, and
// prints measure()'s figures and the K-weighting coefficients at the rate.
// Usage: node measures_harness.mjs <measures.js> <rate> < samples.s16le
import { pathToFileURL } from 'node:url';

const [modulePath, rate] = process.argv.slice(2);
const { kWeighting, measure } = await import(pathToFileURL(modulePath).href);
const parts = [];
for await (const part of process.stdin) parts.push(part);
const bytes = Buffer.concat(parts);
const pcm = new Int16Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.length));
const figures = measure(pcm, Number(rate));
for (const [k, v] of Object.entries(figures)) if (!isFinite(v)) figures[k] = String(v);
console.log(JSON.stringify({ figures, filters: kWeighting(Number(rate)) }));
