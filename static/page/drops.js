// A file dropped where nothing takes one: the browser's own default is to open it in place of the
// page (the takes, the form and a stream playing gone with it). Here it is refused and the page
// says where a file is taken. Drop zones of their own (Gradio's clip boxes, the workbench's file
// buttons) cancel the drop first, and are left to it.

const WHERE = 'Nothing here takes a dropped file, so it was not opened. Drop a take bundle (.zip) on ' +
  '“Import bundle…”, a recording on “Load a recording as B…”, or a voice clip on a clip box.';
const SHOWN_MS = 8000;

// True while a drag carries files (not text or a link being dragged about the page).
export const carriesFiles = (e) => [...(e.dataTransfer?.types || [])].includes('Files');

export function guardDrops() {
  // Cancelled, a dragover makes the page a drop target: the stray drop then comes to the listener
  // below, instead of being the browser's to open. Bubbling, so a drop zone's own handler acts first.
  document.addEventListener('dragover', (e) => {
    if (carriesFiles(e) && !e.defaultPrevented) e.preventDefault();
  });
  document.addEventListener('drop', (e) => {
    if (!carriesFiles(e) || e.defaultPrevented) return;
    e.preventDefault();
    say(WHERE);
  });
}

// A note fixed in view (the drop may be anywhere on a long page), gone after a while.
function say(text) {
  let note = document.getElementById('vox-drop-note');
  if (!note) {
    note = Object.assign(document.createElement('div'), { id: 'vox-drop-note', className: 'vox-drop-note' });
    note.setAttribute('role', 'alert');
    document.body.append(note);
  }
  note.textContent = text;
  note.hidden = false;
  clearTimeout(note.timer);
  note.timer = setTimeout(() => { note.hidden = true; }, SHOWN_MS);
}
