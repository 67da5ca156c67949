// The arena planner: lifetimes from the node order, in-place and view sharing, then a greedy
// offset assignment tried under a few orders, keeping the smallest arena.
#include "graph/planner.h"

#include <algorithm>
#include <functional>
#include <numeric>
#include <random>

namespace hr {

// Note [inputs in the arena]
// INPUT values are planned like intermediates, each with an arena slot, but live from the first
// node (not from their first reader) to their last reader: the executor copies every input in
// before the first node runs. Copying each just before its first reader kept a late input's
// bytes free for earlier values, but a copy issued mid-run waits behind whatever the copy
// engine already holds: in a streamed SDXL step the latent, first read by node 8, queued behind
// the staging ring's first 169-225 MiB of weights and the step waited 2.7-4.1 ms for it (Note
// [inputs before the ring] in stream_copies.cpp). A step's inputs are small (latent, text context,
// timestep: under 1 MiB for SDXL at 1024x1024), so holding them from the start costs little.
// Weights are never in the arena; they are bound by name at run time (WeightSource).
//
// Note [views]
// A RESHAPE output is a view: Value::view_of names the storage it aliases, no kernel runs
// and it takes no arena space. The storage's lifetime is extended to the view's last reader
// (and to the end when the view is an output). A view of a weight lives in the weight.
//
// Note [lifetimes]
// Time is the node index. A value defined by node i and last read by node j is live on
// [i, j], both ends included, so a node's inputs and output never overlap unless the
// planner chose so (Note [in-place]). Outputs live to the last node: they are copied out
// after it. A node's workspace is a slot live on [i, i].
//
// Note [in-place]
// An element-wise node (op_allows_in_place) may write its output over an input whose storage
// dies at this node and is not an output: the two then form one slot (a "block") whose
// lifetime is the union. The input must have exactly the output's shape and element size, so
// output element k overwrites only input element k after it was read.
//
// Note [planner quality]
// Offset assignment is interval packing, NP-hard in general. The lower bound is the most
// bytes live at any one node; a placement reaching it is optimal. Greedy placement under a
// few orders (size, pressure = live bytes at the block's busiest node, area, length, time)
// with best- and first-fit reaches it on UNet-shaped graphs; on adversarial random graphs a
// short deterministic local search over the best order closes most of the remaining gap.

namespace {

// One slot in the arena: a value with its views and in-place successors, or a workspace.
struct Block {
  uint64_t size = 0;  // aligned
  int32_t first = 0;
  int32_t last = 0;
  bool has_output = false;
  ValueId head = kNoValue;  // first value of the block; kNoValue for a workspace
  int32_t node = -1;        // for a workspace: its node
};

struct Placement {
  std::vector<uint64_t> offsets;
  uint64_t arena = 0;
};

enum class Fit { BEST, FIRST };

// Greedy placement: take blocks in `order`; put each at the gap among already placed blocks
// whose lifetimes overlap it that fits it best (smallest sufficient gap) or first (lowest
// offset); when no gap fits, on top of them.
Placement place(const std::vector<Block>& blocks, const std::vector<size_t>& order, Fit fit) {
  Placement p;
  p.offsets.assign(blocks.size(), 0);
  std::vector<size_t> placed;
  placed.reserve(order.size());
  std::vector<std::pair<uint64_t, uint64_t>> busy;  // [offset, end) of conflicting blocks
  for (size_t b : order) {
    const Block& x = blocks[b];
    if (x.size == 0) continue;
    busy.clear();
    for (size_t c : placed) {
      const Block& y = blocks[c];
      if (y.last < x.first || y.first > x.last) continue;
      busy.emplace_back(p.offsets[c], p.offsets[c] + y.size);
    }
    std::sort(busy.begin(), busy.end());
    uint64_t cur = 0, best = UINT64_MAX, best_gap = UINT64_MAX;
    for (const auto& [lo, hi] : busy) {
      if (lo > cur && lo - cur >= x.size) {
        uint64_t gap = lo - cur;
        if (fit == Fit::FIRST) {
          best = cur;
          break;
        }
        if (gap < best_gap) {
          best_gap = gap;
          best = cur;
        }
      }
      cur = std::max(cur, hi);
    }
    uint64_t off = best != UINT64_MAX ? best : cur;
    p.offsets[b] = off;
    p.arena = std::max(p.arena, off + x.size);
    placed.push_back(b);
  }
  return p;
}

}  // namespace

bool op_allows_in_place(const Graph& g, const Node& n, ValueId input) {
  const TensorDesc& in = g.desc(input);
  const TensorDesc& out = g.desc(n.output);
  switch (n.kind) {
    case OpKind::GELU:
    case OpKind::GELU_TANH:
    case OpKind::QUICK_GELU:
    case OpKind::SILU:
    case OpKind::TANH:
    case OpKind::SCALE:
    case OpKind::ADD:
    case OpKind::SUB:
    case OpKind::MUL:
    case OpKind::DIV:
      return in == out;
    // CAST is not here: conversions (dtype_convert) are not defined for overlapping buffers
    // and the CPU backend refuses them.
    default:
      return false;
  }
}

Result<ArenaPlan> arena_plan(const Graph& g, const BackendKernels& kernels) {
  if (!g.status().ok()) return g.status().with_context("graph has a build error");
  const std::vector<Value>& vals = g.values();
  const std::vector<Node>& nodes = g.nodes();
  const int32_t n = int32_t(nodes.size());
  const int32_t end = std::max(n - 1, 0);  // the last node: outputs live to it
  const size_t nv = vals.size();

  ArenaPlan plan;
  plan.values.assign(nv, ValueSlot{});
  plan.nodes.assign(size_t(n), NodeSlot{});
  plan.weight_bytes = g.weight_bytes();

  auto in_arena = [&](ValueId v) {
    return vals[size_t(v)].kind != ValueKind::WEIGHT &&
           vals[size_t(g.storage_of(v))].kind != ValueKind::WEIGHT;
  };

  // Per-value lifetimes (Note [lifetimes]); first = -1 until known.
  std::vector<int32_t> first(nv, -1), last(nv, -1);
  std::vector<bool> keeps_output(nv, false);  // the value or one of its views is an output
  for (int32_t i = 0; i < n; ++i) {
    const Node& node = nodes[size_t(i)];
    first[size_t(node.output)] = i;
    last[size_t(node.output)] = i;
    for (ValueId v : node.inputs) {
      if (first[size_t(v)] < 0) first[size_t(v)] = i;
      last[size_t(v)] = std::max(last[size_t(v)], i);
    }
  }
  for (size_t v = 0; v < nv; ++v) {
    if (first[v] < 0) first[v] = last[v] = 0;  // unused input or weight
    if (vals[v].kind == ValueKind::INPUT) first[v] = 0;  // Note [inputs in the arena]
    if (vals[v].is_output) {
      last[v] = end;
      keeps_output[v] = true;
    }
  }
  // Note [views]: a view is created after its storage, so one pass over views suffices.
  for (size_t v = 0; v < nv; ++v) {
    ValueId s = vals[v].view_of;
    if (s == kNoValue) continue;
    last[size_t(s)] = std::max(last[size_t(s)], last[v]);
    if (keeps_output[v]) keeps_output[size_t(s)] = true;
  }

  // Blocks: inputs first, then per node its output (unless a view or in place) and workspace.
  std::vector<Block> blocks;
  std::vector<int32_t> block_of(nv, -1);
  auto new_block = [&](ValueId v) {
    Block b;
    b.size = align_up(vals[size_t(v)].desc.bytes());
    b.first = first[size_t(v)];
    b.last = last[size_t(v)];
    b.has_output = keeps_output[size_t(v)];
    b.head = v;
    block_of[size_t(v)] = int32_t(blocks.size());
    blocks.push_back(b);
  };
  for (size_t v = 0; v < nv; ++v)
    if (vals[v].kind == ValueKind::INPUT) new_block(ValueId(v));
  std::vector<int32_t> ws_block(size_t(n), -1);
  std::vector<TensorDesc> descs;
  for (int32_t i = 0; i < n; ++i) {
    const Node& node = nodes[size_t(i)];
    NodeSlot& ns = plan.nodes[size_t(i)];
    if (node.kind == OpKind::RESHAPE) {
      ns.view = true;
      continue;
    }
    const ValueId o = node.output;
    int32_t shared = -1;
    for (ValueId x : node.inputs) {
      if (!in_arena(x) || !op_allows_in_place(g, node, x)) continue;
      int32_t b = block_of[size_t(g.storage_of(x))];
      if (blocks[size_t(b)].last == i && !blocks[size_t(b)].has_output) {
        shared = b;
        break;
      }
    }
    if (shared >= 0) {
      Block& b = blocks[size_t(shared)];
      b.last = std::max(b.last, last[size_t(o)]);
      b.has_output = b.has_output || keeps_output[size_t(o)];
      block_of[size_t(o)] = shared;
      ns.in_place = true;
    } else {
      new_block(o);
    }
    descs.clear();
    for (ValueId x : node.inputs) descs.push_back(g.desc(x));
    ns.workspace_bytes = kernels.op_workspace(node.kind, node.params, descs, g.desc(o));
    if (ns.workspace_bytes > 0) {
      Block w;
      w.size = align_up(ns.workspace_bytes);
      w.first = w.last = i;
      w.node = i;
      ws_block[size_t(i)] = int32_t(blocks.size());
      blocks.push_back(w);
    }
    plan.workspace_peak = std::max(plan.workspace_peak, ns.workspace_bytes);
  }

  // Live bytes per node by a difference array over block lifetimes; the lower bound is their
  // maximum (Note [planner quality]).
  std::vector<int64_t> delta(size_t(n) + 1, 0);
  for (const Block& b : blocks) {
    if (n == 0) break;
    delta[size_t(b.first)] += int64_t(b.size);
    delta[size_t(b.last) + 1] -= int64_t(b.size);
  }
  int64_t live = 0;
  for (int32_t i = 0; i < n; ++i) {
    live += delta[size_t(i)];
    plan.nodes[size_t(i)].live_bytes = uint64_t(live);
    plan.lower_bound = std::max(plan.lower_bound, uint64_t(live));
  }
  if (n == 0)
    for (const Block& b : blocks) plan.lower_bound += b.size;  // all live at once
  // Pressure of a block: the most bytes live at any node of its lifetime.
  std::vector<uint64_t> pressure(blocks.size(), 0);
  for (size_t b = 0; b < blocks.size() && n > 0; ++b)
    for (int32_t i = blocks[b].first; i <= blocks[b].last; ++i)
      pressure[b] = std::max(pressure[b], plan.nodes[size_t(i)].live_bytes);

  // Orders to try; ties broken by block index so the result is deterministic.
  std::vector<size_t> base(blocks.size());
  std::iota(base.begin(), base.end(), size_t(0));
  auto length = [&](size_t b) { return uint64_t(blocks[b].last - blocks[b].first + 1); };
  auto size = [&](size_t b) { return blocks[b].size; };
  struct Order {
    const char* name;
    std::function<bool(size_t, size_t)> less;
  };
  const Order orders[] = {
      {"size-desc", [&](size_t a, size_t b) { return size(a) > size(b); }},
      {"pressure-desc",
       [&](size_t a, size_t b) {
         return pressure[a] != pressure[b] ? pressure[a] > pressure[b] : size(a) > size(b);
       }},
      {"area-desc", [&](size_t a, size_t b) { return size(a) * length(a) > size(b) * length(b); }},
      {"length-desc",
       [&](size_t a, size_t b) {
         return length(a) != length(b) ? length(a) > length(b) : size(a) > size(b);
       }},
      {"time-asc",
       [&](size_t a, size_t b) {
         return blocks[a].first != blocks[b].first ? blocks[a].first < blocks[b].first
                                                   : size(a) > size(b);
       }},
  };
  Placement best;
  best.arena = UINT64_MAX;
  std::vector<size_t> best_order;
  Fit best_fit = Fit::BEST;
  for (const Order& ord : orders) {
    std::vector<size_t> order = base;
    std::stable_sort(order.begin(), order.end(), ord.less);
    for (Fit fit : {Fit::BEST, Fit::FIRST}) {
      Placement p = place(blocks, order, fit);
      if (p.arena < best.arena) {
        best = std::move(p);
        best_order = order;
        best_fit = fit;
        plan.strategy = std::string(ord.name) + (fit == Fit::BEST ? "/best-fit" : "/first-fit");
      }
    }
  }
  // Local search while above the bound: swap a few entries of the best order, keep the
  // result when it is no worse. A fixed seed keeps plans deterministic; the number of tries
  // shrinks with the graph so planning stays cheap (each try is quadratic in blocks).
  if (blocks.size() > 2 && best.arena > plan.lower_bound) {
    std::mt19937 rng(0x5eed);
    const uint64_t nb = blocks.size();
    const int tries = int(std::min<uint64_t>(256, uint64_t(2e8) / (nb * nb)));
    int improved = 0;
    for (int t = 0; t < tries && best.arena > plan.lower_bound; ++t) {
      std::vector<size_t> order = best_order;
      const int swaps = 1 + int(rng() % 3);
      for (int k = 0; k < swaps; ++k) {
        size_t i = rng() % nb;
        size_t j = std::min<size_t>(nb - 1, i + 1 + rng() % std::min<uint64_t>(nb, 8));
        std::swap(order[i], order[j]);
      }
      Placement p = place(blocks, order, best_fit);
      if (p.arena <= best.arena) {
        improved += p.arena < best.arena;
        best = std::move(p);
        best_order = std::move(order);
      }
    }
    if (improved) plan.strategy += fmt::format(" +{} local", improved);
  }
  plan.arena_bytes = blocks.empty() ? 0 : best.arena;

  for (size_t v = 0; v < nv; ++v) {
    ValueSlot& s = plan.values[v];
    s.bytes = vals[v].desc.bytes();
    s.first = first[v];
    s.last = last[v];
    if (vals[v].view_of != kNoValue) s.first = vals[v].producer;
    if (!in_arena(ValueId(v))) continue;
    int32_t b = block_of[size_t(g.storage_of(ValueId(v)))];
    s.offset = int64_t(best.offsets[size_t(b)]);
    s.storage = blocks[size_t(b)].head;
    if (vals[v].kind == ValueKind::INPUT) plan.input_bytes += s.bytes;
  }
  for (ValueId o : g.outputs()) plan.output_bytes += vals[size_t(o)].desc.bytes();
  for (int32_t i = 0; i < n; ++i)
    if (ws_block[size_t(i)] >= 0)
      plan.nodes[size_t(i)].workspace_offset = best.offsets[size_t(ws_block[size_t(i)])];

  return plan;
}

}  // namespace hr
