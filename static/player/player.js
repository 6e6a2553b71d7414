// The player: sends one request to the stream route (framed: ui/http/frames.py), feeds the worklet
// as frames arrive, keeps the exact samples and chunk boundaries for the WAV and the listening-QA
// workbench, and drives the metrics panel. static/app.js starts it and hands it the form.

import { FrameParser } from './frames.js';
import { Panel } from './panel.js';
import { toFloat32, wavBlob } from './pcm.js';
import { Run } from './run.js';
import { clipName, clipUrl, errorText, missingClip, requestBody, route, spec } from './server.js';
import { addTake, runFileName } from '../workbench/workbench.js';

const POLL_MS = 200;
const LIVE = ['sending', 'streaming', 'received']; // on its way or still playing
const sleep = (t) => new Promise((resolve) => setTimeout(resolve, t));

// The audio output: one AudioContext at the model's rate (so samples reach the worklet untouched)
// and the gapless worklet player in it (static/player/pcm-worklet.js). Built at page load,
// suspended until a click may start it, so the first Generate does not pay for loading the worklet.
class Output {
  constructor(onReport) {
    this.ctx = null;
    this.node = null;
    this.onReport = onReport; // each message of the worklet: started, underrun, resumed, ended, metrics
  }

  async open(rate, prebufferMs, start = true) {
    if (!this.ctx || this.ctx.sampleRate !== rate || this.ctx.state === 'closed') {
      if (this.ctx && this.ctx.state !== 'closed') await this.ctx.close();
      this.ctx = new AudioContext({ sampleRate: rate, latencyHint: 'interactive' });
      await this.ctx.audioWorklet.addModule(new URL('pcm-worklet.js', import.meta.url));
      this.node = new AudioWorkletNode(this.ctx, 'pcm-player', {
        outputChannelCount: [1],
        processorOptions: { prebufferSamples: Math.round((prebufferMs / 1000) * rate), fadeSamples: Math.round(rate / 200) },
      });
      this.node.port.onmessage = (event) => this.onReport(event.data);
      this.node.connect(this.ctx.destination);
    }
    if (start && this.ctx.state === 'suspended') await this.ctx.resume();
  }

  // Everything played from now on belongs to the stream `id`; null silences the player at once.
  reset(id) {
    if (this.node) this.node.port.postMessage({ type: 'reset', id });
  }

  push(floats) {
    this.node.port.postMessage({ type: 'push', samples: floats }, [floats.buffer]);
  }

  end() {
    this.node.port.postMessage({ type: 'end' });
  }

  // Milliseconds from a sample leaving the worklet to the speaker, as the browser reports it.
  latencyMs() {
    return ((this.ctx.outputLatency || 0) + (this.ctx.baseLatency || 0)) * 1000;
  }
}

export class Player {
  constructor() {
    this.output = new Output((msg) => this.onWorklet(msg));
    this.run = null;
    this.panel = new Panel('vox-panel');
    this.prebufferOverride = null;
  }

  // prebufferMs: the page's own choice (?prebuffer_ms=, for listening tests), else the server's.
  async start({ prebufferMs = null } = {}) {
    this.prebufferOverride = prebufferMs;
    try {
      await this.output.open(...(await this.playback()), false); // read now, so Generate does not wait for it
    } catch (err) {
      console.warn('voxcpm: audio will be set up on the first click', err);
    }
  }

  // [the model's rate, the audio the worklet holds before it starts to play], as GET /voxcpm/spec states them.
  async playback() {
    const served = await spec();
    return [served.sample_rate, this.prebufferOverride ?? served.prebuffer_ms];
  }

  onWorklet(msg) {
    const run = this.run;
    if (!run || msg.id !== run.id) return; // a report from before the last reset
    // Stopped: the player was emptied, but reports it sent before that may still be on their way
    // (a busy page reads them late) and put the buffer of a moment before back on screen (issue 58).
    if (run.state === 'stopped') return;
    run.heard(msg, this.output.ctx.sampleRate);
    if (msg.type === 'started') {
      run.audibleAt = performance.now();
      run.outputLatencyMs = this.output.latencyMs();
    }
    if (msg.type === 'ended') {
      run.playbackDone = true;
      if (run.state === 'received') this.finished(run);
    }
    this.panel.update(run);
  }

  // The form as static/page/gradio.js hands it, with the saved voice picked for its mode.
  generate(form) {
    this.begin(form).catch((err) => console.error('voxcpm', err));
  }

  async begin(form) {
    const before = this.run;
    if (this.abort('replaced') || before?.state === 'received') this.replaced(before);
    const run = new Run();
    this.run = run;
    this.panel.clear();
    this.panel.status('Sending the request…');
    if (!(await this.ready(run, form))) return;
    this.output.reset(run.id);
    this.poll(run);
    try {
      await this.send(run);
    } catch (err) {
      if (run.state !== 'stopped') this.fail(run, `The connection failed: ${err.message || err}`);
    }
  }

  // Without the spec or a player nothing is sent: the request could not be built, or would
  // generate audio nobody hears.
  async ready(run, form) {
    let modes;
    try {
      modes = await spec();
      run.body = requestBody(form, modes, run.id);
      run.clip = clipName(form, modes);
      run.clipUrl = clipUrl(form, modes);
      run.sampleRate = modes.sample_rate;
      run.words = run.body.timestamps === 'word' ? [] : null;
      if (form.word_timestamps && !run.words) run.wordErrors.push({ segment: null, error: 'this server sends no word timestamps' });
    } catch (err) {
      this.fail(run, `The page could not read the server's settings: ${err.message || err}`);
      return false;
    }
    const missing = missingClip(run.body, modes);
    if (missing) {
      this.fail(run, missing);
      return false;
    }
    try {
      await this.output.open(...(await this.playback()));
      return true;
    } catch (err) {
      const hint = window.isSecureContext ? '' : ' Browsers allow audio worklets only on https:// or '
        + 'http://localhost pages: open the app through one of those (an SSH tunnel to localhost works).';
      this.fail(run, `The audio player could not start: ${err.message || err}.${hint}`);
      return false;
    }
  }

  async send(run) {
    const { frames } = await spec();
    const response = await fetch(route('stream'), {
      method: 'POST', headers: { 'Content-Type': 'application/json', Accept: frames.media_type },
      body: JSON.stringify(run.body), signal: run.controller.signal,
    });
    if (!response.ok) return this.fail(run, await errorText(response));
    await this.read(run, response);
    this.output.end();
    this.received(run);
  }

  async read(run, response) {
    run.sampleRate = Number(response.headers.get('X-Sample-Rate') || run.sampleRate);
    if (run.sampleRate !== this.output.ctx.sampleRate) throw new Error(`unexpected sample rate ${run.sampleRate}`);
    run.seed = response.headers.get('X-Seed');
    run.state = 'streaming';
    this.panel.status('Streaming…');
    const parser = new FrameParser((await spec()).frames);
    const reader = response.body.getReader();
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      if (!value || !value.length) continue;
      const now = performance.now();
      run.firstByteAt ??= now;
      run.lastByteAt = now;
      run.reads += 1;
      for (const frame of parser.push(value)) {
        const pcm = run.take(frame, now);
        if (pcm) this.output.push(toFloat32(pcm));
      }
      this.panel.update(run);
    }
    parser.finish(); // a body cut inside a frame is a failed connection, not a finished take
    if (!run.final) throw new Error('the stream ended without its status frame');
  }

  // A run that another module drives (live text, static/player/live.js): it plays through this
  // player and panel, and ends in the workbench like any other. False when the player cannot start.
  async adopt(run) {
    const before = this.run;
    if (this.abort('replaced') || before?.state === 'received') this.replaced(before);
    this.run = run;
    this.panel.clear();
    try {
      await this.output.open(...(await this.playback()));
    } catch (err) {
      this.fail(run, `The audio player could not start: ${err.message || err}`);
      return false;
    }
    this.output.reset(run.id);
    return true;
  }

  // Samples of an adopted run, as they arrive.
  hear(run, pcm) {
    if (this.run !== run || run.state === 'stopped') return;
    const now = performance.now();
    run.firstByteAt ??= now;
    run.lastByteAt = now;
    run.reads += 1;
    run.state = 'streaming';
    run.boundaries.push({ index: run.chunks.length, offset: run.samples, samples: pcm.length, client_ms: now - run.t0 });
    run.take({ kind: 'audio', pcm }, now);
    this.output.push(toFloat32(pcm));
    this.panel.update(run);
  }

  // An adopted run's audio is all in: `final` as a status frame would say it.
  ended(run, final) {
    if (this.run !== run || run.state === 'stopped') return;
    this.output.end();
    run.final = final;
    this.received(run);
  }

  // The status frame says how it ended: a failure after the first patch ends the body too.
  received(run) {
    run.server = run.final;
    if (run.final.state === 'failed') {
      this.fail(run, run.final.error);
      this.keep(run);
      return;
    }
    run.cut = run.final.state === 'cut' ? run.final.error : null; // the most audio a request may have: kept as made
    run.state = 'received';
    this.offerWav(run, '');
    if (run.playbackDone) this.finished(run);
    else this.panel.status('All audio received; playing the rest…');
  }

  // The server's view (queue position while waiting, then its own TTFP and RTF) through a side route.
  async poll(run) {
    while (this.run === run && !run.final) {
      await sleep(run.state === 'sending' ? POLL_MS : 1000); // the server lists the job from its intake on
      if (this.run !== run || run.state === 'failed' || run.final) return; // refused or ended: nothing to ask
      await this.refresh(run);
      const server = run.server;
      if (server && run.state === 'sending') {
        this.panel.status(server.state === 'queued' ? `Waiting in the queue: position ${server.position}`
          : server.state === 'preparing' ? 'Preparing the text…' : 'Generating the first patch…');
      }
      this.panel.update(run);
      // From the first byte on, the stream's own frames carry the server's figures and outcome;
      // a text of several segments is still polled for its sentences (normalized as it goes).
      if (run.state !== 'sending' && !(run.server && run.server.segment_count > 1)) return;
    }
  }

  async refresh(run) {
    try {
      const response = await fetch(route(`jobs/${run.id}`), { cache: 'no-store' });
      const status = response.ok ? await response.json() : null;
      if (status && !run.final) run.server = status; // the status frame, once in, is the last word
    } catch (err) { /* kept from the last poll; the next one will tell */ }
  }

  offerWav(run, note) {
    if (!run.samples) return;
    run.wavUrl = URL.createObjectURL(wavBlob(run.chunks, run.sampleRate));
    const seconds = (run.samples / run.sampleRate).toFixed(2);
    this.panel.showResult(run.wavUrl, runFileName(run), `${seconds} s, exactly the samples streamed${note}`);
  }

  // Played to the end: green only when nothing was heard missing.
  finished(run) {
    const gaps = run.underruns;
    if (run.cut) this.finish(run, 'cut', run.cut, 'warn');
    else if (!gaps) this.finish(run, 'finished', 'Finished: the whole utterance has played.');
    else this.finish(run, 'finished', `Finished with ${gaps} gap${gaps > 1 ? 's' : ''} (${Math.round(run.gapMs())} ms)`, 'warn');
    this.keep(run);
  }

  // Into the workbench; it draws the take only while no newer one is streaming. Its underruns go
  // to the server too (ui/http/status.py), for the operator's /metrics.
  keep(run) {
    addTake(run, () => this.live()).catch((err) => console.error('voxcpm: the take was not kept', err));
    const report = { job: run.id, underruns: run.underruns || 0, gap_ms: run.gapMs() };
    fetch(route('playback'), { method: 'POST', headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify(report), keepalive: true }).catch(() => {}); // a lost report costs only a count
    if (run.onKept) run.onKept(); // live text: a Generate pressed during its session starts now
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
    if (!run) return false;
    const live = ['sending', 'streaming'].includes(run.state);
    if (live) {
      run.state = 'stopped';
      run.controller.abort(reason);
      if (run.onStop) run.onStop(); // live text: its socket says so (there is no job of that id)
      else fetch(route(`jobs/${run.id}/cancel`), { method: 'POST', keepalive: true }).catch(() => {});
    }
    this.output.reset(null);
    this.panel.hideResult(); // its audio lets go of the WAV before the URL is revoked (else it re-requests it)
    if (run.wavUrl) URL.revokeObjectURL(run.wavUrl);
    return live;
  }

  // A Generate while the last run streamed or played: it is kept as a stopped take all the same.
  replaced(run) {
    run.state = 'stopped';
    run.error = 'replaced by the next Generate';
    this.keep(run);
  }

  stop() {
    const run = this.run;
    if (!run) return;
    const before = run.state;
    if (!LIVE.includes(before)) {
      this.output.reset(null); // nothing is arriving or playing: a finished run keeps its WAV and replay
      return;
    }
    this.abort('stopped');
    run.state = 'stopped';
    run.buffered = 0; // the reset emptied the player
    this.offerWav(run, before === 'received' ? '' : ' (stopped early: only what had arrived)');
    this.panel.status('Stopped.', 'warn');
    this.panel.update(run);
    this.keep(run);
  }

  live() {
    return Boolean(this.run && LIVE.includes(this.run.state));
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
    return { ...rest, clientRtf: run.clientRtf(), serverRtf: run.serverRtf(), contextRate: this.output.ctx?.sampleRate,
      contextState: this.output.ctx?.state };
  }
}

export const player = new Player();

// The last take, for the voice library to keep, once no more of it is coming: all of it received
// (playing or played) or stopped; null while none is.
export function arrivedTake() {
  const run = player.run;
  return run && run.samples && ['finished', 'received', 'stopped'].includes(run.state) ? run : null;
}
