// Runs static/workbench/analysis.js's boundaryScores in Node, as the page does when it keeps a take.
// Usage: node analysis_harness.mjs <analysis.js> < '{"pcm": [int16...], "boundaries": [{offset, pause?}...], "rate": Hz}';
// prints the scores as JSON.
import { pathToFileURL } from 'node:url';

const [modulePath] = process.argv.slice(2);
const { boundaryScores } = await import(pathToFileURL(modulePath).href);
const parts = [];
for await (const part of process.stdin) parts.push(part);
const { pcm, boundaries, rate } = JSON.parse(Buffer.concat(parts).toString());
console.log(JSON.stringify(boundaryScores(Int16Array.from(pcm), boundaries, rate)));
