// The one module that knows Gradio's markup: the elem_ids ui/page/layout.py gives the form, how
// Gradio draws a textbox and a tab's button, and when it has drawn a part of the page. The player,
// the workbench and the voice panel reach the form only through the functions exported here.
//
// Why Gradio's js= hooks and not click listeners of our own on the buttons: a hook is handed the
// form's values as Gradio holds them (a clip component's file name, the sliders of a closed
// accordion, which are not in the DOM until it opens) and can set them back the same way. Each hook
// in ui/page/layout.py (`hook` there) imports this module by its URL, the one the page's own
// script resolves it to, so it reaches this same instance: no window global is needed.

// Form field -> elem_id of its Gradio component (ui/page/layout.py), for the fields read here.
const IDS = {
  mode: 'vox-mode', cloning_ref: 'vox-clone-ref', ultimate_ref: 'vox-ultimate-ref', ultimate_transcript: 'vox-ultimate-transcript',
};

// A cloning mode -> the stem of its clip box's elem_ids (vox-clone-audio, vox-clone-fill-clip...).
const CLIP_BOXES = { cloning: 'vox-clone', ultimate: 'vox-ultimate' };

let handlers = {}; // generate(form), stop(), clipChanged(), clipStored(mode, id): set once by static/app.js
let pendingFill = null; // { values: field -> value, done(previous) }, until the fill hook hands them to Gradio
// The text setTranscript was last asked for. Every click of the transcript's fill button puts in
// this latest one, never the value Gradio hands the hook: that value is read at the click, so of two
// calls in a row (a picked voice's transcript after the old one cleared) the second click's hook
// got the box's text from before the first had landed, and wrote the stale transcript back.
let wantedTranscript = null;
let pendingClip = null; // Gradio's value of a clip, until a clip box's fill button hands it over (setClip)
let pendingReads = []; // readForm's resolves (live text's, the kept form's), until the read button's hook hands them the form

export function handle(fns) {
  handlers = fns;
}

// The form as a hook hands it: field name -> value, a clip component's value cut to its file name
// (and <mode>_audio_url, where the page can read the clip's bytes: the workbench keeps them).
function formOf(names, values) {
  const form = Object.fromEntries(names.map((name, i) => [name, values[i]]));
  for (const name of names) {
    if (!name.endsWith('_audio')) continue;
    const url = form[name]?.url;
    form[`${name}_url`] = url ? new URL(url, document.baseURI).href : null;
    form[name] = fileName(form[name]);
  }
  return form;
}

// Gradio's value of an audio component (uploads and recordings alike): { path, orig_name, ... }.
function fileName(value) {
  return value ? value.orig_name || (value.path || '').split('/').pop() || null : null;
}

// -- the hooks (ui/page/layout.py): Gradio calls them with the values of the event's inputs ---------

export function generate(names, values) {
  handlers.generate?.(formOf(names, values));
  return [];
}

// The hidden read button's hook: the form for readForm().
export function read(names, values) {
  const done = pendingReads;
  pendingReads = [];
  for (const resolve of done) resolve(formOf(names, values));
  return [];
}

export function stop() {
  handlers.stop?.();
  return [];
}

// A new clip was given: its old id is forgotten at once (the hook's output is the id's textbox).
export function clipChanged() {
  handlers.clipChanged?.();
  return '';
}

// A clip's server-side id was set (an upload or recording stored; '' while a new one is on its way).
export function clipStored(mode, id) {
  handlers.clipStored?.(mode, id || '');
  return [];
}

// The hook of the hidden button that sets the ultimate tab's transcript alone (setTranscript).
export function filledTranscript(value) {
  return wantedTranscript ?? value;
}

// The hook of a clip box's hidden fill button: the clip setClip uploaded, as Gradio's value of it.
export function filledClip() {
  const clip = pendingClip;
  pendingClip = null;
  return clip;
}

// The hidden fill button's hook: the fields' current values, with those fillForm asked for put in.
export function filled(names, values) {
  const { values: fill = {}, done = null } = pendingFill || {};
  pendingFill = null;
  done?.(Object.fromEntries(names.map((name, i) => [name, values[i]])));
  return names.map((name, i) => (fill[name] == null ? values[i] : fill[name]));
}

// -- what the other modules call -----------------------------------------------------------------

// The tab of a mode on screen, as a click on it does (its content is drawn once first shown).
export async function showTab(mode) {
  (await drawn(`#vox-tab-${mode}-button`)).click();
}

// Puts values (field -> value; null leaves a field as it is) back into the form: the mode's tab is
// selected (Gradio names a tab's button after its elem_id) and the hidden fill button's hook hands
// Gradio the values, which it sets whether or not their components are drawn. Resolves, once
// Gradio has run the hook, with the form's values as they were before (field -> value).
export async function fillForm(values) {
  const previous = new Promise((done) => { pendingFill = { values, done }; });
  await showTab(values.mode);
  (await drawn('#vox-fill')).click();
  return previous;
}

// The form as Gradio holds it now, closed accordions included (live text reads it this way).
export async function readForm() {
  const form = new Promise((resolve) => { pendingReads.push(resolve); });
  (await drawn('#vox-read')).click();
  return form;
}

// An accordion (by its elem_id) open, as a click on its label opens it: its content is drawn then.
export async function openAccordion(id) {
  const label = await drawn(`#${id} .label-wrap`);
  if (!label.classList.contains('open')) label.click();
}

// The Live text box open (static/player/live.js replays a live take there).
export function openLiveText() {
  return openAccordion('vox-live-text');
}

// The line above the text box where the kept form says what came back (static/page/keep.js).
export function formNote() {
  return document.querySelector('#vox-form-note');
}

// fn() after every change the user makes in the form (typed, ticked, dragged, a tab or an example
// clicked); Gradio's own updates send no event.
export function onFormChange(fn) {
  for (const type of ['input', 'change', 'click']) {
    document.addEventListener(type, (event) => {
      if (event.target instanceof Element && event.target.closest('#vox-form-column, #vox-word-timestamps')) fn();
    });
  }
}

// Resolves once Gradio has drawn the form's fill hook: the form can be filled from then on.
export function formDrawn() {
  return drawn('#vox-fill');
}

// Ctrl+Enter (Cmd+Enter on a Mac) anywhere on the page generates, as the Generate button does:
// that button is dozens of Tab stops into the form.
document.addEventListener('keydown', (event) => {
  if (event.key !== 'Enter' || !(event.ctrlKey || event.metaKey) || event.altKey || event.shiftKey) return;
  const button = document.querySelector('#vox-generate');
  if (!button || button.disabled) return;
  event.preventDefault();
  button.click();
});

// The skip link after the text box (ui/page/layout.py): the focus goes to Generate itself, where
// following the link alone would only scroll there.
document.addEventListener('click', (event) => {
  const link = event.target instanceof Element && event.target.closest('a[data-skip-to]');
  const target = link && document.querySelector(`#${link.dataset.skipTo}`);
  if (!target) return;
  event.preventDefault();
  target.focus();
});

// Puts `text` in the ultimate tab's transcript box, and nothing else: a button of its own, so that a
// clip id being stored meanwhile is not written back with its old value.
export async function setTranscript(text) {
  wantedTranscript = text;
  (await drawn('#vox-fill-transcript')).click();
}

// Puts a clip (a Blob) in the clip box of a cloning mode's tab, as a file dropped there would be:
// uploaded to Gradio first (its check lets an event name only a file a user uploaded), then handed
// to the box by the box's hidden fill button. The box's own change event stores it on the server
// and sets its id, as for any clip given there.
export async function setClip(mode, blob, name) {
  const body = new FormData();
  body.append('files', blob, name);
  const response = await fetch(new URL('gradio_api/upload', document.baseURI), { method: 'POST', body });
  if (!response.ok) throw new Error(`the clip could not be put back in its box (the page answered ${response.status})`);
  const [path] = await response.json();
  pendingClip = { path, url: new URL(`gradio_api/file=${path}`, document.baseURI).href, orig_name: name,
    size: blob.size, mime_type: blob.type || null, meta: { _type: 'gradio.FileData' } };
  await showTab(mode);
  (await drawn(`#${CLIP_BOXES[mode]}-fill-clip`)).click();
}

// Calls fn() whenever the user types in the textbox of a form field (Gradio's own updates of its
// value send no input event).
export function onInput(name, fn) {
  document.addEventListener('input', (event) => {
    if (event.target instanceof Element && event.target.closest(`#${IDS[name]}`)) fn();
  });
}

// The text in a textbox of the form as drawn ('' when it is not drawn): hidden ones are drawn too.
export function fieldValue(name) {
  const id = IDS[name];
  const el = id && document.querySelector(`#${id} textarea, #${id} input`);
  return el ? el.value.trim() : '';
}

// -- when Gradio has drawn ---------------------------------------------------------------------------

// Gradio draws the page after the module scripts run, and a tab's or a closed accordion's content
// only once it is first shown: the element matching `selector` once it is there (no time limit).
const waiting = []; // { selector, resolve }
let observer = null;

export function drawn(selector) {
  const el = document.querySelector(selector);
  if (el) return Promise.resolve(el);
  return new Promise((resolve) => {
    waiting.push({ selector, resolve });
    watch();
  });
}

// One observer for every wait, gone once nothing is waited for: the player's panel updates (DOM
// changes on every chunk) then cost nothing here.
function watch() {
  if (observer) return;
  observer = new MutationObserver(() => {
    for (const wait of waiting.slice()) {
      const el = document.querySelector(wait.selector);
      if (!el) continue;
      waiting.splice(waiting.indexOf(wait), 1);
      wait.resolve(el);
    }
    if (!waiting.length) {
      observer.disconnect();
      observer = null;
    }
  });
  observer.observe(document.body, { childList: true, subtree: true });
}

// Gradio names each slider's reset button "Reset to default value": a screen reader listed four
// alike (issue 58). Each is named after its slider's label, as drawn: the sliders are in the
// Advanced accordion, drawn when it first opens, so that is what is watched (the player's panel,
// which changes on every chunk, is not in it).
function nameResets(root) {
  for (const button of root.querySelectorAll('button.reset-button')) {
    const label = button.closest('.block')?.querySelector('[data-testid="block-info"]')?.textContent.trim();
    const name = label ? `Reset ${label} to its default` : null;
    if (name && button.getAttribute('aria-label') !== name) button.setAttribute('aria-label', name);
  }
}

drawn('#vox-advanced').then((box) => {
  nameResets(box);
  new MutationObserver(() => nameResets(box)).observe(box, { childList: true, subtree: true, attributeFilter: ['aria-label'] });
});
