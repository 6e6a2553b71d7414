// Calls one export of a page module in Node, as the page calls it, on arguments read as JSON from
// stdin; an argument {"int16": [...]} arrives as an Int16Array. Prints the result as JSON: typed
// arrays as lists, infinities as the strings "Infinity" / "-Infinity".
// Usage: node module_harness.mjs <module.js> <export> < '[arg, ...]'
import { pathToFileURL } from 'node:url';

const [modulePath, name] = process.argv.slice(2);
const module = await import(pathToFileURL(modulePath).href);
const parts = [];
for await (const part of process.stdin) parts.push(part);
const args = JSON.parse(Buffer.concat(parts).toString(), (k, v) => (v && Array.isArray(v.int16) ? Int16Array.from(v.int16) : v));
const result = await module[name](...args);
console.log(JSON.stringify(result, (k, v) => (ArrayBuffer.isView(v) ? Array.from(v) : typeof v === 'number' && !isFinite(v) ? String(v) : v)));
