// Formatting and defensive reading of server data: every field may be missing or of the wrong
// type (older servers, other front ends), and the page must still render.

// A finite number, or null.
export function num(v) {
  return typeof v === 'number' && Number.isFinite(v) ? v : null;
}

// A string, or `fallback`.
export function str(v, fallback = '') {
  return typeof v === 'string' ? v : fallback;
}

// An object (not an array), or {}.
export function obj(v) {
  return v && typeof v === 'object' && !Array.isArray(v) ? v : {};
}

export function arr(v) {
  return Array.isArray(v) ? v : [];
}

const UNITS = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];

// Binary units as headroom's own output writes them ("12.3 MiB"); "–" for unknown.
export function bytes(n, digits = 1) {
  n = num(n);
  if (n === null) return '–';
  let u = 0;
  let v = n;
  while (Math.abs(v) >= 1024 && u < UNITS.length - 1) {
    v /= 1024;
    u += 1;
  }
  if (u === 0) return `${Math.round(v)} B`;
  return `${v.toFixed(v >= 100 ? 0 : digits)} ${UNITS[u]}`;
}

// "850 ms", "4.2 s", "3 min 05 s".
export function duration(ms) {
  ms = num(ms);
  if (ms === null || ms < 0) return '–';
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60000) return `${(ms / 1000).toFixed(1)} s`;
  const m = Math.floor(ms / 60000);
  const s = Math.round((ms % 60000) / 1000);
  return `${m} min ${String(s).padStart(2, '0')} s`;
}

// Wall-clock time of day ("14:03:27") of ms since the epoch.
export function clock(ms) {
  ms = num(ms);
  if (ms === null) return '–';
  return new Date(ms).toLocaleTimeString([], {hour12: false});
}

// "3f2a9c1e" from a UUID.
export function shortId(id) {
  return str(id, '?').slice(0, 8);
}

export function percent(fraction) {
  fraction = num(fraction);
  return fraction === null ? '–' : `${Math.round(fraction * 100)} %`;
}
