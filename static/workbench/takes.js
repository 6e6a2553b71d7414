// The take history, kept in this browser's IndexedDB so it survives a reload: each take's samples
// (int16), settings and figures. Bounded: past MAX_BYTES or MAX_TAKES the oldest takes go.

const DB = 'voxcpm-qa';
const STORE = 'takes';
export const MAX_BYTES = 200 * 2 ** 20; // about 35 minutes of 48 kHz int16 audio
export const MAX_TAKES = 100;

function request(req) {
  return new Promise((resolve, reject) => {
    req.onsuccess = () => resolve(req.result);
    req.onerror = () => reject(req.error);
  });
}

export class TakeStore {
  async open() {
    if (!this.db) {
      const req = indexedDB.open(DB, 1);
      req.onupgradeneeded = () => req.result.createObjectStore(STORE, { keyPath: 'id' });
      this.db = await request(req);
    }
    return this.db;
  }

  async tx(mode, fn) {
    const db = await this.open();
    const tx = db.transaction(STORE, mode);
    const result = await fn(tx.objectStore(STORE));
    await new Promise((resolve, reject) => { tx.oncomplete = resolve; tx.onerror = () => reject(tx.error); });
    return result;
  }

  // Oldest first.
  async list() {
    const takes = await this.tx('readonly', (s) => request(s.getAll()));
    return takes.sort((a, b) => a.n - b.n);
  }

  // Stores takes (one, or a list: an undone Clear all), then evicts the oldest until the history
  // fits; returns the ids evicted.
  async put(take) {
    const takes = Array.isArray(take) ? take : [take];
    await this.tx('readwrite', (s) => Promise.all(takes.map((t) => request(s.put(t)))));
    return this.evict();
  }

  // A take already stored, changed in what it says of itself (notes, rating, markers...): its
  // samples are the same, so the history's size is too.
  async update(take) {
    await this.tx('readwrite', (s) => request(s.put(take)));
  }

  async evict() {
    const takes = await this.list();
    let bytes = takes.reduce((sum, t) => sum + t.pcm.byteLength, 0);
    const evicted = [];
    while (takes.length > 1 && (bytes > MAX_BYTES || takes.length > MAX_TAKES)) {
      const old = takes.shift();
      bytes -= old.pcm.byteLength;
      evicted.push(old.id);
    }
    for (const id of evicted) await this.remove(id);
    return evicted;
  }

  async remove(id) {
    await this.tx('readwrite', (s) => request(s.delete(id)));
  }

  async clear() {
    await this.tx('readwrite', (s) => request(s.clear()));
  }
}

export function totalBytes(takes) {
  return takes.reduce((sum, t) => sum + t.pcm.byteLength, 0);
}
