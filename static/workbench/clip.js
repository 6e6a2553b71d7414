// The reference clip a cloning take was made from, kept with the take as the file the user gave
// (its bytes, name and type), so that Re-use settings can put that very clip back in its box. The
// server keeps an uploaded clip only for a while, and a reload empties the box: with only the
// clip's server id, a re-used take's box stayed empty and, once the id had gone, Generate failed.

import { setClip } from '../page/gradio.js';

// {name, type, bytes} of the clip a run was made from, read where the page holds it; null for a
// saved voice (the library keeps it), a mode without a clip, or a file no longer there.
// takes: those kept already, one of which may hold the same clip (not read twice).
export async function keepClip(run, takes) {
  if (!run.clipUrl || run.body.voice) return null;
  const same = takes.find((t) => t.clip && t.settings.reference_id === run.body.reference_id);
  if (same) return same.clip;
  try {
    const response = await fetch(run.clipUrl);
    if (!response.ok) return null;
    const blob = await response.blob();
    return { name: run.clip || 'clip', type: blob.type, bytes: await blob.arrayBuffer() };
  } catch (err) {
    return null; // the take is kept all the same, with the clip's id only
  }
}

// The take's clip back in its mode's box (the box stores it on the server, as a file dropped there).
export function putClipBack(take) {
  const clip = take.clip;
  return setClip(take.settings.mode, new Blob([clip.bytes], { type: clip.type }), clip.name);
}
