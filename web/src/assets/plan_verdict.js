// What a memory plan (POST /headroom/plan) means for a job, in one word and a reason.
import {arr, num, obj, str} from './format.js';

// {kind: 'fits' | 'streams' | 'tiles' | 'splits' | 'no-fit', label, reason}.
export function planVerdict(plan) {
  const p = obj(plan);
  const nodes = arr(p.nodes).map(obj);
  if (p.fits === false) {
    return {kind: 'no-fit', label: 'does not fit', reason: str(p.why_not, 'no plan fits the budget')};
  }
  const tiled = nodes.filter((n) => /tiled/.test(str(n.decision)));
  const streamed = nodes.filter((n) => (num(n.streamed_bytes) || 0) > 0);
  const split = nodes.filter((n) => /one after the other|per image|per entry/.test(str(n.decision)));
  const names = (list) => list.map((n) => `${str(n.node_id)} ${str(n.class_type)}`).join(', ');
  if (tiled.length) return {kind: 'tiles', label: 'will tile', reason: names(tiled)};
  if (streamed.length) return {kind: 'streams', label: 'will stream', reason: names(streamed)};
  if (split.length) return {kind: 'splits', label: 'will split', reason: names(split)};
  return {kind: 'fits', label: 'fits', reason: 'every node runs whole with its weights resident'};
}
