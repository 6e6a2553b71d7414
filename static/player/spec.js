// The modes and request settings as the server states them (GET /voxcpm/spec, built from
// inference/request/modes.py, the same spec the page's sliders are built from): what each mode
// reads, and each setting's range, default and whether it is a whole number.

import { errorText, route } from './http.js';

let loading = null;

export function spec() {
  if (!loading) {
    loading = fetch(route('spec'), { cache: 'no-store' }).then(async (response) => {
      if (!response.ok) throw new Error(await errorText(response));
      return response.json();
    });
    loading.catch(() => { loading = null; }); // a failed read is tried again on the next call
  }
  return loading;
}
