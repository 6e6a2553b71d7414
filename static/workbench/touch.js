// A finger on the waveform: sideways it selects (the Regions plugin's drag), up or down it scrolls
// the page. wavesurfer.js (vendored, not edited) takes any move past 3 px as its drag once the
// finger has rested 100 ms: it then cancels the touchmoves, so a vertical swipe by a finger that
// rested a moment scrolled nothing and selected a sliver; and where the browser had begun to
// scroll, each cancel it tried was refused with a warning (9 of them on one swipe). A vertical move
// is kept from its listeners here, on the window before they see it; the browser scrolls (the
// waveform's touch-action is pan-y).

const THRESHOLD_PX = 3; // wavesurfer's own: the move at which its drag begins, decided here first

export function scrollOnVerticalSwipe(element) {
  let start = null; // {id, x, y, vertical}: the finger down on the element, until it lifts
  const keep = (e) => { if (start?.vertical) e.stopImmediatePropagation(); };
  window.addEventListener('pointerdown', (e) => {
    start = e.pointerType === 'touch' && element.contains(e.target) ? { id: e.pointerId, x: e.clientX, y: e.clientY, vertical: null } : null;
  }, true);
  window.addEventListener('pointermove', (e) => {
    if (!start || e.pointerId !== start.id) return;
    const dx = Math.abs(e.clientX - start.x);
    const dy = Math.abs(e.clientY - start.y);
    if (start.vertical === null && Math.max(dx, dy) > THRESHOLD_PX) start.vertical = dy > dx;
    keep(e);
  }, true);
  window.addEventListener('touchmove', keep, { capture: true, passive: true });
  for (const end of ['pointerup', 'pointercancel']) {
    window.addEventListener(end, (e) => { if (start && e.pointerId === start.id && !start.vertical) start = null; }, true);
  }
  window.addEventListener('touchend', () => { start = null; }, true);
}
