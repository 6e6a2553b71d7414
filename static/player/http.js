// Shared by the page's modules: where the app's routes are, and the message of a refused request
// (the routes answer {"error": ...}).

const API = new URL('../../', import.meta.url); // .../voxcpm/, wherever the app is mounted

export function route(path) {
  return new URL(path, API);
}

export async function errorText(response) {
  try {
    const data = await response.json();
    if (data && data.error) return data.error;
  } catch (err) { /* not JSON */ }
  return `the server answered ${response.status}`;
}
