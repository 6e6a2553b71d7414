// The form as the user left it, back after a reload (issue 58: a reload lost the text, the mode, the
// settings and the clip). The fields go in localStorage, read at once on the next load; a clip's
// bytes in IndexedDB, up to CLIP_LIMIT each (a larger one is named in the note instead, to be given
// again). Restored through the same hooks as Re-use settings (static/page/gradio.js), so Gradio
// holds the values, closed accordions included; a clip goes back into its box and is stored on the
// server again, as one dropped there would be.

import { fillForm, formDrawn, formNote, onFormChange, readForm, setClip, showTab } from './gradio.js';

const KEY = 'voxcpm-form';
const CLIP_LIMIT = 10 * 2 ** 20;
const MODES = ['cloning', 'ultimate'];
// The server's ids of stored clips are not kept: they expire; the clip itself is stored again.
const NOT_KEPT = new Set(['cloning_ref', 'ultimate_ref', 'cloning_audio', 'ultimate_audio']);

let ready = false; // saving starts once the last visit's form is back (or there was none)
let typed = false; // the user changed the form before it was restored: theirs is kept, not overwritten
let timer = null;
const kept = { cloning: null, ultimate: null }; // the clip url whose bytes are stored, per mode

// -- the clips' bytes: IndexedDB, one record per cloning mode ------------------------------------

function clipStore(mode, write) {
  return new Promise((resolve, reject) => {
    const open = indexedDB.open(KEY, 1);
    open.onupgradeneeded = () => open.result.createObjectStore('clips');
    open.onerror = () => reject(open.error);
    open.onsuccess = () => {
      const tx = open.result.transaction('clips', write === undefined ? 'readonly' : 'readwrite');
      const store = tx.objectStore('clips');
      const req = write === undefined ? store.get(mode) : write === null ? store.delete(mode) : store.put(write, mode);
      tx.oncomplete = () => { open.result.close(); resolve(req.result); };
      tx.onerror = () => { open.result.close(); reject(tx.error); };
    };
  });
}

function say(text) {
  const note = formNote();
  if (note) note.textContent = text;
}

// -- saving --------------------------------------------------------------------------------------

// Called on every change of the form: saved once it has been still for a moment.
export function remember() {
  if (!ready) return;
  clearTimeout(timer);
  timer = setTimeout(() => save().catch((err) => console.warn('voxcpm: the form was not kept', err)), 400);
}

async function save() {
  const form = await readForm();
  const fields = Object.fromEntries(Object.entries(form).filter(([name]) => !NOT_KEPT.has(name) && !name.endsWith('_url')));
  const clips = {};
  for (const mode of MODES) clips[mode] = await saveClip(mode, form[`${mode}_audio`], form[`${mode}_audio_url`]);
  localStorage.setItem(KEY, JSON.stringify({ fields, clips }));
}

// A clip's bytes, fetched from Gradio's copy once per clip; {name, size, kept} or null for none.
async function saveClip(mode, name, url) {
  if (!url) {
    if (kept[mode] !== null) await clipStore(mode, null);
    kept[mode] = null;
    return null;
  }
  const before = JSON.parse(localStorage.getItem(KEY) || '{}').clips?.[mode];
  if (kept[mode] === url && before) return before;
  const blob = await (await fetch(url)).blob();
  const fits = blob.size <= CLIP_LIMIT;
  await clipStore(mode, fits ? { blob, name } : null);
  kept[mode] = url;
  if (!fits) say(`The clip “${name}” is over ${CLIP_LIMIT / 2 ** 20} MB: it will not be kept for your next visit.`);
  return { name, size: blob.size, kept: fits };
}

// Every change in the form (typed, ticked, dragged, a tab or an example clicked; Gradio's own
// updates send no event) is saved; the last visit's form comes back once Gradio has drawn the page.
export function keepForm() {
  onFormChange(remember);
  formDrawn().then(restore);
}

// -- restoring -----------------------------------------------------------------------------------

// The last visit's form, once Gradio has drawn the page; then every change is saved.
async function restore() {
  document.addEventListener('input', noteTyped, true);
  try {
    const saved = JSON.parse(localStorage.getItem(KEY) || 'null');
    if (saved?.fields) await restoreSaved(saved);
  } catch (err) {
    console.warn('voxcpm: the last visit\'s form could not be restored', err);
  } finally {
    document.removeEventListener('input', noteTyped, true);
    ready = true;
    formNote()?.setAttribute('data-restore', 'done');
  }
}

function noteTyped(event) {
  if (event.isTrusted) typed = true;
}

async function restoreSaved({ fields, clips = {} }) {
  const missing = [];
  for (const mode of MODES) {
    const clip = clips[mode];
    if (!clip) continue;
    const record = clip.kept ? await clipStore(mode) : null;
    if (record) await setClip(mode, record.blob, record.name);
    else missing.push(`the ${mode === 'cloning' ? 'controllable' : 'ultimate'} cloning clip “${clip.name}” (${(clip.size / 2 ** 20).toFixed(1)} MB, over ${CLIP_LIMIT / 2 ** 20} MB)`);
  }
  if (!typed) await fillForm({ ...fields, cloning_ref: null, ultimate_ref: null });
  else await showTab(fields.mode);
  const back = typed ? 'Your last visit\'s clips are back; the text you typed meanwhile is kept.'
    : 'The form is as you left it: text, mode, settings and clips.';
  say(missing.length ? `${back} Not kept, give it again: ${missing.join('; ')}.` : back);
}
