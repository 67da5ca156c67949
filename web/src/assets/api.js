// The server's HTTP routes the dashboard uses: ComfyUI's (/prompt, /queue, /history, /interrupt,
// /view, /system_stats) and headroom's (/headroom/memory, /headroom/levels, /headroom/workers,
// /headroom/plan).

// The message of an error body ({error: "..."} or ComfyUI's {error: {message, details}}).
function errorText(status, body) {
  const e = body && body.error;
  if (typeof e === 'string') return e;
  if (e && typeof e === 'object') {
    const details = typeof e.details === 'string' && e.details ? `: ${e.details}` : '';
    const nodes = body.node_errors && typeof body.node_errors === 'object' ? body.node_errors : {};
    const first = Object.entries(nodes)[0];
    const nodeMsg = first && Array.isArray(first[1].errors) && first[1].errors[0]
      ? ` (node ${first[0]}: ${first[1].errors[0].message || ''} ${first[1].errors[0].details || ''})`
      : '';
    return `${e.message || e.type || 'error'}${details}${nodeMsg}`;
  }
  return `HTTP ${status}`;
}

async function request(method, path, body) {
  const init = {method, headers: {}};
  if (body !== undefined) {
    init.headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  const res = await fetch(path, init);
  const text = await res.text();
  let json = null;
  try {
    json = text ? JSON.parse(text) : null;
  } catch {
    json = null;
  }
  if (!res.ok) throw new Error(errorText(res.status, json));
  return json;
}

export const api = {
  queue: () => request('GET', '/queue'),
  history: (maxItems) => request('GET', `/history?max_items=${maxItems}`),
  systemStats: () => request('GET', '/system_stats'),
  memory: () => request('GET', '/headroom/memory'),
  levels: () => request('GET', '/headroom/levels'),
  workers: () => request('GET', '/headroom/workers'),
  setLevels: (warning, danger) => request('POST', '/headroom/levels', {warning, danger}),
  // `budget`: bytes, a size such as "6GiB", or null for the server's.
  plan: (prompt, budget = null) => request('POST', '/headroom/plan', {prompt, budget}),
  queuePrompt: (prompt, clientId) => request('POST', '/prompt', {prompt, client_id: clientId}),
  interrupt: (promptId) => request('POST', '/interrupt', {prompt_id: promptId}),
  deletePending: (promptId) => request('POST', '/queue', {delete: [promptId]}),
  deleteHistory: (promptId) => request('POST', '/history', {delete: [promptId]}),
};

// /view URL of an image entry of a node's UI output ({filename, subfolder, type}).
export function viewUrl(image) {
  const q = new URLSearchParams({
    filename: String(image.filename || ''),
    subfolder: String(image.subfolder || ''),
    type: String(image.type || 'output'),
  });
  return `/view?${q}`;
}
