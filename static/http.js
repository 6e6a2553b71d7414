// Shared by the page's modules: the message of a refused request (the routes answer {"error": ...}).

export async function errorText(response) {
  try {
    const data = await response.json();
    if (data && data.error) return data.error;
  } catch (err) { /* not JSON */ }
  return `the server answered ${response.status}`;
}
