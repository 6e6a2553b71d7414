// Page side of the player: sends one request to the stream route (framed: ui/http/frames.py), feeds
// the AudioWorklet as frames arrive, keeps the exact samples and chunk boundaries for the WAV and
// the listening-QA workbench, and drives the metrics panel.
// Gradio's buttons call window.voxcpm.generate / stop (see ui/page/layout.py).

import { FrameParser, MEDIA_TYPE } from './frames.js';
import { Panel } from './panel.js';
import { toFloat32, wavBlob } from './pcm.js';
import { errorText } from './http.js';
import './voices.js'; // the voice library; window.voxcpmVoices.picked(mode) names a saved voice
import { Workbench } from './workbench.js';

const API = new URL('../', import.meta.url); // .../voxcpm/, wherever the app is mounted
const POLL_MS = 200;
const sleep = (t) => new Promise((resolve) => setTimeout(resolve, t));

class Run {
  constructor(rate) {
    this.id = (crypto.randomUUID ? crypto.randomUUID() : `${Date.now()}-${Math.random()}`).replace(/[^A-Za-z0-9-]/g, '');
    this.sampleRate = rate;
    this.t0 = performance.now();
    this.controller = new AbortController();
    this.chunks = []; // Int16Array per patch: the WAV is built from exactly these
    this.samples = 0;
    this.reads = 0; // network reads, for the record: patches are what Chunks counts
    this.boundaries = []; // per patch: {index, offset, samples, server_ms, client_ms} from its metadata frame
    this.underrunTimes = []; // {at: samples played when the player ran dry, gapMs}
    this.final = null; // the status frame: outcome and server figures
    this.played = 0;
    this.buffered = 0;
    this.underruns = 0;
    this.firstByteAt = null;
    this.lastByteAt = null;
    this.audibleAt = null;
    this.outputLatencyMs = 0;
    this.server = null;
    this.seed = null;
    this.state = 'sending'; // sending -> streaming -> received -> finished | stopped | failed
    this.playbackDone = false;
    this.error = null;
  }

  clientRtf() {
    if (!this.samples) return null;
    return ((this.lastByteAt ?? performance.now()) - this.t0) / 1000 / (this.samples / this.sampleRate);
  }

  // The server's RTF from the last metadata frame's clock, until the status frame gives the final one.
  serverRtf() {
    if (this.final && this.final.rtf != null) return this.final.rtf;
    const last = this.boundaries[this.boundaries.length - 1];
    return last ? last.server_ms / 1000 / ((last.offset + last.samples) / this.sampleRate) : null;
  }

  gapMs() {
    return this.underrunTimes.reduce((sum, u) => sum + (u.gapMs || 0), 0);
  }
}

class VoxApp {
  constructor() {
    this.ctx = null;
    this.node = null;
    this.run = null;
    this.panel = new Panel(null);
    this.workbench = new Workbench(this);
  }

  // The server writes the model's rate and the prebuffer into this module's URL (ui/server.py);
  // ?prebuffer_ms= on the page overrides the prebuffer, for listening tests.
  config() {
    this.panel.root = document.getElementById('vox-panel');
    const own = new URL(import.meta.url).searchParams;
    const page = new URLSearchParams(location.search);
    return {
      rate: Number(own.get('rate') || 48000),
      prebufferMs: Number(page.get('prebuffer_ms') ?? own.get('prebuffer_ms') ?? 80),
    };
  }

  // Built at page load (suspended until a click may start it) so the first Generate does not pay
  // for loading the worklet.
  async prepare() {
    const { rate, prebufferMs } = this.config();
    try {
      await this.audio(rate, prebufferMs, false);
    } catch (err) {
      console.warn('voxcpm: audio will be set up on the first click', err);
    }
  }

  // The context runs at the model's rate so samples go to the worklet untouched.
  async audio(rate, prebufferMs, start = true) {
    if (!this.ctx || this.ctx.sampleRate !== rate || this.ctx.state === 'closed') {
      if (this.ctx && this.ctx.state !== 'closed') await this.ctx.close();
      this.ctx = new AudioContext({ sampleRate: rate, latencyHint: 'interactive' });
      await this.ctx.audioWorklet.addModule(new URL('pcm-worklet.js', import.meta.url));
      this.node = new AudioWorkletNode(this.ctx, 'pcm-player', {
        outputChannelCount: [1],
        processorOptions: { prebufferSamples: Math.round((prebufferMs / 1000) * rate), fadeSamples: Math.round(rate / 200) },
      });
      this.node.port.onmessage = (event) => this.onWorklet(event.data);
      this.node.connect(this.ctx.destination);
    }
    if (start && this.ctx.state === 'suspended') await this.ctx.resume();
  }

  onWorklet(msg) {
    const run = this.run;
    if (!run || msg.id !== run.id) return; // a report from before the last reset
    Object.assign(run, { played: msg.played, buffered: msg.buffered, underruns: msg.underruns });
    if (msg.type === 'underrun') run.underrunTimes.push({ at: msg.played, frame: msg.frame, gapMs: null });
    if (msg.type === 'resumed' && run.underrunTimes.length) {
      const last = run.underrunTimes[run.underrunTimes.length - 1];
      last.gapMs = ((msg.frame - last.frame) / this.ctx.sampleRate) * 1000;
    }
    if (msg.type === 'started') {
      run.audibleAt = performance.now();
      run.outputLatencyMs = ((this.ctx.outputLatency || 0) + (this.ctx.baseLatency || 0)) * 1000;
    }
    if (msg.type === 'ended') {
      run.playbackDone = true;
      if (run.state === 'received') this.finished(run);
    }
    this.panel.update(run);
  }

  // Called by the Generate button with the names and values of the form's inputs.
  generate(names, values) {
    const form = Object.fromEntries(names.map((name, i) => [name, values[i]]));
    this.lastForm = form;
    this.start(form).catch((err) => console.error('voxcpm', err));
    return [];
  }

  body(form, run) {
    const text = (v) => (typeof v === 'string' && v.trim() ? v : null);
    const body = {
      mode: form.mode, text: form.text ?? '', request_id: run.id,
      cfg_value: Number(form.cfg_value), inference_timesteps: Math.round(Number(form.inference_timesteps)),
      max_len: Math.round(Number(form.max_len)),
      normalize: Boolean(form.normalize),
      trim_silence: form.mode !== 'design' && Boolean(form.trim_silence),
      seed: form.random_seed || form.seed == null || form.seed === '' ? null : Math.round(Number(form.seed)),
    };
    if (form.mode === 'design') body.control = text(form.description);
    if (form.mode === 'cloning') Object.assign(body, { reference_id: text(form.clone_ref), control: text(form.clone_style) });
    if (form.mode === 'ultimate') Object.assign(body, { reference_id: text(form.ultimate_ref), prompt_text: text(form.ultimate_transcript) });
    const voice = form.mode !== 'design' && window.voxcpmVoices ? window.voxcpmVoices.picked(form.mode) : '';
    if (voice) Object.assign(body, { voice, reference_id: null }); // a saved voice instead of the clip
    return body;
  }

  async start(form) {
    const { rate, prebufferMs } = this.config();
    this.abort('replaced');
    const run = new Run(rate);
    run.body = this.body(form, run); // kept on the run: what was asked is part of what it shows
    run.clip = clipName(form);
    this.run = run;
    this.panel.clear();
    this.panel.status('Sending the request…');
    try {
      await this.audio(rate, prebufferMs);
    } catch (err) {
      // Without a player nothing is sent: the request would generate audio nobody hears.
      const hint = window.isSecureContext ? '' : ' Browsers allow audio worklets only on https:// or '
        + 'http://localhost pages: open the app through one of those (an SSH tunnel to localhost works).';
      return this.fail(run, `The audio player could not start: ${err.message || err}.${hint}`);
    }
    this.node.port.postMessage({ type: 'reset', id: run.id });
    this.poll(run);
    try {
      const response = await fetch(new URL('stream', API), {
        method: 'POST', headers: { 'Content-Type': 'application/json', Accept: MEDIA_TYPE },
        body: JSON.stringify(run.body), signal: run.controller.signal,
      });
      if (!response.ok) return this.fail(run, await errorText(response));
      await this.read(run, response);
      this.node.port.postMessage({ type: 'end' });
      // The status frame says how it ended: a failure after the first patch ends the body too.
      run.server = run.final;
      if (run.final.state === 'failed') {
        this.fail(run, run.final.error);
        return this.workbench.add(run);
      }
      run.state = 'received';
      this.offerWav(run, '');
      if (run.playbackDone) this.finished(run);
      else this.panel.status('All audio received; playing the rest…');
    } catch (err) {
      if (run.state === 'stopped') return;
      this.fail(run, `The connection failed: ${err.message || err}`);
    }
  }

  async read(run, response) {
    run.sampleRate = Number(response.headers.get('X-Sample-Rate') || run.sampleRate);
    if (run.sampleRate !== this.ctx.sampleRate) throw new Error(`unexpected sample rate ${run.sampleRate}`);
    run.seed = response.headers.get('X-Seed');
    run.state = 'streaming';
    this.panel.status('Streaming…');
    const parser = new FrameParser();
    const reader = response.body.getReader();
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      if (!value || !value.length) continue;
      const now = performance.now();
      run.firstByteAt ??= now;
      run.lastByteAt = now;
      run.reads += 1;
      for (const frame of parser.push(value)) this.onFrame(run, frame, now);
      this.panel.update(run);
    }
    parser.finish(); // a body cut inside a frame is a failed connection, not a finished take
    if (!run.final) throw new Error('the stream ended without its status frame');
  }

  onFrame(run, frame, now) {
    if (frame.kind === 'meta') run.boundaries.push({ ...frame.data, client_ms: now - run.t0 });
    if (frame.kind === 'status') run.final = frame.data;
    if (frame.kind !== 'audio' || !frame.pcm.length) return;
    run.chunks.push(frame.pcm);
    run.samples += frame.pcm.length;
    const floats = toFloat32(frame.pcm);
    this.node.port.postMessage({ type: 'push', samples: floats }, [floats.buffer]);
  }

  // The server's view (queue position while waiting, then its own TTFP and RTF) through a side route.
  async poll(run) {
    while (this.run === run && !run.final) {
      await sleep(run.state === "sending" ? POLL_MS : 1000); // the job exists by the first poll
      await this.refresh(run);
      const server = run.server;
      if (server && run.state === 'sending') {
        this.panel.status(server.state === 'queued' ? `Waiting in the queue: position ${server.position}` : 'Generating the first patch…');
      }
      this.panel.update(run);
      // From the first byte on, the stream's own frames carry the server's figures and outcome;
      // a text of several segments is still polled for its sentences (normalized as it goes).
      if (run.state !== 'sending' && !(run.server && run.server.segment_count > 1)) return;
    }
  }

  async refresh(run) {
    try {
      const response = await fetch(new URL(`jobs/${run.id}`, API), { cache: 'no-store' });
      const status = response.ok ? await response.json() : null;
      if (status && !run.final) run.server = status; // the status frame, once in, is the last word
    } catch (err) { /* kept from the last poll; the next one will tell */ }
  }

  offerWav(run, note) {
    if (!run.samples) return;
    run.wavUrl = URL.createObjectURL(wavBlob(run.chunks, run.sampleRate));
    const seconds = (run.samples / run.sampleRate).toFixed(2);
    this.panel.showResult(run.wavUrl, `voxcpm2-seed${run.seed}.wav`, `${seconds} s, exactly the samples streamed${note}`);
  }

  // Played to the end: green only when nothing was heard missing.
  finished(run) {
    const gaps = run.underruns;
    if (!gaps) this.finish(run, 'finished', 'Finished: the whole utterance has played.');
    else this.finish(run, 'finished', `Finished with ${gaps} gap${gaps > 1 ? 's' : ''} (${Math.round(run.gapMs())} ms)`, 'warn');
    this.workbench.add(run);
  }

  finish(run, state, message, kind = null) {
    run.state = state;
    this.panel.status(message, kind || (state === 'finished' ? 'ok' : 'warn'));
    this.panel.update(run);
  }

  fail(run, message) {
    run.error = message;
    run.state = 'failed';
    this.panel.status(`Error: ${message}`, 'error');
    this.panel.update(run);
  }

  // Stop: drop the connection (the server stops within one patch), say so explicitly too, and
  // silence the player at once.
  abort(reason) {
    const run = this.run;
    if (!run) return;
    const live = ['sending', 'streaming'].includes(run.state);
    if (live) {
      run.state = 'stopped';
      run.controller.abort(reason);
      fetch(new URL(`jobs/${run.id}/cancel`, API), { method: 'POST', keepalive: true }).catch(() => {});
    }
    if (this.node) this.node.port.postMessage({ type: 'reset', id: null });
    if (run.wavUrl) URL.revokeObjectURL(run.wavUrl);
    this.panel.hideResult();
    return live;
  }

  stop() {
    const run = this.run;
    if (!run) return [];
    const before = run.state;
    if (!['sending', 'streaming', 'received'].includes(before)) {
      // Nothing is arriving or playing: a finished run keeps its WAV and replay on the page.
      if (this.node) this.node.port.postMessage({ type: 'reset', id: null });
      return [];
    }
    this.abort('stopped');
    run.state = 'stopped';
    run.buffered = 0; // the reset emptied the player
    this.offerWav(run, before === 'received' ? '' : ' (stopped early: only what had arrived)');
    this.panel.status('Stopped.', 'warn');
    this.panel.update(run);
    this.workbench.add(run);
    return [];
  }

  // A take is on its way or still playing.
  live() {
    return Boolean(this.run && ['sending', 'streaming', 'received'].includes(this.run.state));
  }

  // A new reference clip was given: an error about the last one no longer applies.
  clipChanged() {
    const status = this.panel.field('status');
    if (status && status.dataset.kind === 'error' && (!this.run || !['sending', 'streaming'].includes(this.run.state))) {
      this.panel.status('Ready.');
    }
  }

  snapshot() {
    const run = this.run;
    if (!run) return null;
    const { chunks, controller, ...rest } = run;
    return { ...rest, clientRtf: run.clientRtf(), serverRtf: run.serverRtf(), contextRate: this.ctx?.sampleRate,
      contextState: this.ctx?.state };
  }
}

// The reference clip's file name, as Gradio's audio component holds it (uploads and recordings).
function clipName(form) {
  const value = form.mode === 'cloning' ? form.clone_audio : form.mode === 'ultimate' ? form.ultimate_audio : null;
  return value ? (value.orig_name || (value.path || '').split('/').pop() || null) : null;
}

window.voxcpm = new VoxApp();
window.voxcpm.prepare();
