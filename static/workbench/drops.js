// Files dropped on the workbench's two file buttons: a bundle on Import bundle is imported, a
// recording on "Load a recording as B…" loaded as B, as if chosen in the file dialog. Each button
// is marked while a file is held over it. Dropped anywhere else, the page's guard
// (static/page/drops.js) keeps the browser from opening the file in place of the page.

import { importBundles } from './listing.js';
import { carriesFiles } from '../page/drops.js';

function dropTarget(label, take) {
  const over = (e) => {
    if (!carriesFiles(e)) return;
    e.preventDefault(); // without it the drop is the browser's: it opens the file
    e.dataTransfer.dropEffect = 'copy';
    label.dataset.dropping = 'true';
  };
  label.addEventListener('dragenter', over);
  label.addEventListener('dragover', over);
  label.addEventListener('dragleave', () => { delete label.dataset.dropping; });
  label.addEventListener('drop', (e) => {
    delete label.dataset.dropping;
    if (!carriesFiles(e)) return;
    e.preventDefault();
    take([...e.dataTransfer.files]);
  });
}

export function wireDrops(wb) {
  dropTarget(wb.el('import').closest('label'), (files) => importBundles(wb, files));
  dropTarget(wb.el('b-file').closest('label'), (files) => {
    if (files.length > 1) wb.say(`B is one recording: loaded the first of the ${files.length} files dropped, “${files[0].name}”.`);
    return wb.compare.load(files[0]).catch((err) => wb.say(String(err.message || err)));
  });
}
