// The graph builder: values, nodes, shape inference through op_infer, the first-error status,
// RESHAPE views and the exact structure key that plan caches use.
#include "graph/graph.h"

#include <algorithm>
#include <cstring>
#include <iterator>

namespace hr {

ValueId Graph::add_value(Value v) {
  values_.push_back(std::move(v));
  return ValueId(values_.size() - 1);
}

void Graph::fail(Status s) {
  if (status_.ok()) status_ = std::move(s);
}

ValueId Graph::input(const std::string& name, TensorDesc desc) {
  if (inputs_by_name_.count(name)) {
    fail(make_error(ErrorCode::INVALID_ARGUMENT, "input '{}' is declared twice", name));
    return kNoValue;
  }
  Value v;
  v.desc = desc;
  v.kind = ValueKind::INPUT;
  v.name = name;
  ValueId id = add_value(std::move(v));
  inputs_by_name_[name] = id;
  key_value(id);
  return id;
}

const char* weight_layout_name(WeightLayout l) {
  switch (l) {
    case WeightLayout::CONV_OHWI: return "ohwi";
    case WeightLayout::STACK: return "stack";
    default: return "stored";
  }
}

// Note [weight keys]
std::string weight_key(const std::string& name, WeightLayout layout) {
  return layout == WeightLayout::STORED ? name : name + '@' + weight_layout_name(layout);
}

std::pair<std::string, WeightLayout> weight_key_split(const std::string& key) {
  const size_t at = key.rfind('@');
  if (at != std::string::npos)
    for (WeightLayout l : {WeightLayout::CONV_OHWI, WeightLayout::STACK})
      if (key.compare(at + 1, std::string::npos, weight_layout_name(l)) == 0)
        return {key.substr(0, at), l};
  return {key, WeightLayout::STORED};
}

std::string weight_stack_name(const std::vector<std::string>& parts) {
  std::string s;
  for (const std::string& p : parts) {
    if (!s.empty()) s += '+';
    s += p;
  }
  return s;
}

std::vector<std::string> weight_stack_parts(const std::string& name) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at <= name.size()) {
    const size_t plus = std::min(name.find('+', at), name.size());
    out.push_back(name.substr(at, plus - at));
    at = plus + 1;
  }
  return out;
}

Result<TensorDesc> weight_stack_desc(const std::vector<TensorDesc>& parts) {
  if (parts.empty()) return make_error(ErrorCode::INVALID_ARGUMENT, "weight_stack: no parts");
  Shape s = parts[0].shape;
  if (s.rank < 1) return make_error(ErrorCode::INVALID_ARGUMENT, "weight_stack: a scalar part");
  for (size_t i = 1; i < parts.size(); ++i) {
    Shape o = parts[i].shape;
    const int64_t rows = o.rank >= 1 ? o[0] : 0;
    if (o.rank >= 1) o[0] = s[0];
    if (o != s || parts[i].dtype != parts[0].dtype)
      return make_error(ErrorCode::INVALID_ARGUMENT, "weight_stack: part {} is {}, part 0 {}", i,
                        parts[i].str(), parts[0].str());
    s[0] += rows;
  }
  return TensorDesc{parts[0].dtype, s};
}

Result<HostTensor> weight_stack(const std::vector<const HostTensor*>& parts) {
  std::vector<TensorDesc> descs;
  for (const HostTensor* p : parts) descs.push_back(p->desc());
  HR_ASSIGN_OR_RETURN(TensorDesc d, weight_stack_desc(descs));
  // Note [placeholder tensors]: parts without data stack into a stack without data.
  if (std::all_of(parts.begin(), parts.end(), [](const HostTensor* p) { return p->is_placeholder(); }))
    return HostTensor::placeholder(d);
  HostTensor out(d);
  char* dst = static_cast<char*>(out.data());
  for (const HostTensor* p : parts) {
    if (p->bytes()) std::memcpy(dst, p->data(), p->bytes());
    dst += p->bytes();
  }
  return out;
}

Result<TensorDesc> weight_layout_desc(const TensorDesc& stored, WeightLayout layout) {
  if (layout == WeightLayout::STORED) return stored;
  if (layout == WeightLayout::STACK)
    return make_error(ErrorCode::INVALID_ARGUMENT,
                      "a stacked weight's descriptor follows from its parts, not from one tensor");
  const Shape& s = stored.shape;
  if (s.rank != 4)
    return make_error(ErrorCode::INVALID_ARGUMENT,
                      "weight layout {} needs a 4-d convolution filter, not {}",
                      weight_layout_name(layout), stored.str());
  return TensorDesc{stored.dtype, Shape{s[0], s[2], s[3], s[1]}};
}

Result<HostTensor> weight_relayout(const HostTensor& stored, WeightLayout layout) {
  HR_ASSIGN_OR_RETURN(TensorDesc d, weight_layout_desc(stored.desc(), layout));
  if (stored.is_placeholder()) return HostTensor::placeholder(d);  // Note [placeholder tensors]
  HostTensor out(d);
  if (layout == WeightLayout::STORED) {
    if (out.bytes()) std::memcpy(out.data(), stored.data(), out.bytes());
    return out;
  }
  // [O, C, KH, KW] -> [O, KH, KW, C]: per output channel, a [C, KH*KW] -> [KH*KW, C] transpose.
  const Shape& s = stored.shape();
  const int64_t o = s[0], c = s[1], kk = s[2] * s[3];
  auto transpose = [&](auto tag) {
    using E = decltype(tag);
    const E* src = static_cast<const E*>(stored.data());
    E* dst = static_cast<E*>(out.data());
    for (int64_t i = 0; i < o; ++i) {
      const E* a = src + i * c * kk;
      E* b = dst + i * c * kk;
      for (int64_t ci = 0; ci < c; ++ci)
        for (int64_t k = 0; k < kk; ++k) b[k * c + ci] = a[ci * kk + k];
    }
  };
  switch (dtype_size(stored.dtype())) {
    case 1: transpose(uint8_t{}); break;
    case 2: transpose(uint16_t{}); break;
    case 4: transpose(uint32_t{}); break;
    case 8: transpose(uint64_t{}); break;
    default:
      return make_error(ErrorCode::INVALID_ARGUMENT, "weight_relayout: element size of {}",
                        dtype_name(stored.dtype()));
  }
  return out;
}

ValueId Graph::weight(const std::string& name, TensorDesc desc, WeightLayout layout) {
  if (storage_ && layout == WeightLayout::STORED)
    if (auto s = storage_->find(name); s != storage_->end() && s->second.dtype != desc.dtype)
      return weight_stored(name, desc, s->second);
  const std::string wkey = weight_key(name, layout);
  auto it = weights_by_name_.find(wkey);
  if (it != weights_by_name_.end()) {
    if (values_[size_t(it->second)].desc == desc) return it->second;
    fail(make_error(ErrorCode::INVALID_ARGUMENT, "weight '{}' is declared as {} and as {}", name,
                    values_[size_t(it->second)].desc.str(), desc.str()));
    return kNoValue;
  }
  Value v;
  v.desc = desc;
  v.kind = ValueKind::WEIGHT;
  v.name = name;
  v.layout = layout;
  ValueId id = add_value(std::move(v));
  weights_by_name_[wkey] = id;
  key_value(id);
  return id;
}

std::string weight_storage_key(const WeightStorageMap* storage) {
  if (!storage || storage->empty()) return "";
  std::vector<const std::pair<const std::string, WeightStorage>*> sorted;
  for (const auto& e : *storage) sorted.push_back(&e);
  std::sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) { return a->first < b->first; });
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  auto mix = [&](std::string_view s) {
    for (char ch : s) h = (h ^ uint8_t(ch)) * 1099511628211ull;
    h = (h ^ 0xff) * 1099511628211ull;
  };
  for (auto* e : sorted) {
    mix(e->first);
    mix(dtype_name(e->second.dtype));
    mix(e->second.scale);
    mix(e->second.fast ? "fast" : "");
  }
  return fmt::format("{} stored, {:016x}", storage->size(), h);
}

// Note [fp8 weights]: the stored weight, CAST to desc's dtype, times its scale.
ValueId Graph::weight_stored(const std::string& name, TensorDesc desc, const WeightStorage& s) {
  if (auto it = dequantized_.find(name); it != dequantized_.end()) {
    if (values_[size_t(it->second)].desc == desc) return it->second;
    fail(make_error(ErrorCode::INVALID_ARGUMENT, "weight '{}' is declared as {} and as {}", name,
                    values_[size_t(it->second)].desc.str(), desc.str()));
    return kNoValue;
  }
  // Declared in their stored dtypes, the weight and its scale are plain weights.
  const ValueId stored = weight(name, TensorDesc{s.dtype, desc.shape});
  ValueId v = kNoValue;
  if (s.scale.empty()) {
    v = cast(stored, desc.dtype, name + ".dequant");
  } else {
    OpParams p;
    p.dtype = desc.dtype;
    v = op(OpKind::CAST, p, {stored, weight(s.scale, TensorDesc{DType::F32, Shape{1}})},
           name + ".dequant");
  }
  dequantized_[name] = v;
  return v;
}

ValueId Graph::find_input(const std::string& name) const {
  auto it = inputs_by_name_.find(name);
  return it == inputs_by_name_.end() ? kNoValue : it->second;
}

ValueId Graph::find_weight(const std::string& name, WeightLayout layout) const {
  auto it = weights_by_name_.find(weight_key(name, layout));
  return it == weights_by_name_.end() ? kNoValue : it->second;
}

ValueId Graph::op(OpKind kind, const OpParams& params, std::vector<ValueId> inputs,
                  const std::string& name) {
  if (!status_.ok()) return kNoValue;
  const size_t index = nodes_.size();
  std::string node_name = name.empty() ? fmt::format("{}.{}", op_name(kind), index) : name;
  std::vector<TensorDesc> descs;
  descs.reserve(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    ValueId v = inputs[i];
    if (v < 0 || size_t(v) >= values_.size()) {
      fail(make_error(ErrorCode::INVALID_ARGUMENT, "{}: {}: input {} is not a value (id {})",
                      node_name, op_name(kind), i, v));
      return kNoValue;
    }
    descs.push_back(values_[size_t(v)].desc);
  }
  Result<TensorDesc> out = op_infer(kind, params, descs);
  if (!out.ok()) {
    fail(out.status().with_context(node_name));
    return kNoValue;
  }
  Value v;
  v.desc = *out;
  v.kind = ValueKind::INTERMEDIATE;
  v.producer = int32_t(index);
  if (kind == OpKind::RESHAPE) v.view_of = storage_of(inputs[0]);
  ValueId id = add_value(std::move(v));

  Node n;
  n.kind = kind;
  n.params = params;
  n.inputs = std::move(inputs);
  n.output = id;
  n.name = std::move(node_name);
  nodes_.push_back(std::move(n));
  key_node(nodes_.back());
  return id;
}

void Graph::output(ValueId v, const std::string& name) {
  if (!status_.ok()) return;
  if (v < 0 || size_t(v) >= values_.size()) {
    fail(make_error(ErrorCode::INVALID_ARGUMENT, "output '{}' is not a value (id {})", name, v));
    return;
  }
  Value& x = values_[size_t(v)];
  if (!x.is_output) outputs_.push_back(v);
  x.is_output = true;
  // Inputs and weights keep their binding name; intermediates take the output name.
  if (x.kind == ValueKind::INTERMEDIATE) x.name = name;
  fmt::format_to(std::back_inserter(key_), "!{}#{}:{};", v, name.size(), name);
}

std::vector<ValueId> Graph::outputs() const { return outputs_; }

uint64_t Graph::weight_bytes() const {
  uint64_t n = 0;
  for (const Value& v : values_)
    if (v.kind == ValueKind::WEIGHT) n += v.desc.bytes();
  return n;
}

ValueId Graph::linear(ValueId x, ValueId w, ValueId b, const std::string& name) {
  std::vector<ValueId> in{x, w};
  if (b != kNoValue) in.push_back(b);
  return op(OpKind::LINEAR, OpParams{}, std::move(in), name);
}

ValueId Graph::conv2d(ValueId x, ValueId w, ValueId b, int stride, int pad,
                      const std::string& name) {
  OpParams p;
  p.stride[0] = p.stride[1] = stride;
  for (int& q : p.pad) q = pad;
  std::vector<ValueId> in{x, w};
  if (b != kNoValue) in.push_back(b);
  return op(OpKind::CONV2D, p, std::move(in), name);
}

ValueId Graph::group_norm(ValueId x, ValueId g, ValueId b, int groups, float eps, bool silu,
                          const std::string& name) {
  OpParams p;
  p.groups = groups;
  p.eps = eps;
  p.fuse_silu = silu;
  return op(OpKind::GROUP_NORM, p, {x, g, b}, name);
}

ValueId Graph::layer_norm(ValueId x, ValueId g, ValueId b, float eps, const std::string& name) {
  OpParams p;
  p.eps = eps;
  std::vector<ValueId> in{x, g};
  if (b != kNoValue) in.push_back(b);
  return op(OpKind::LAYER_NORM, p, std::move(in), name);
}

ValueId Graph::attention(ValueId q, ValueId k, ValueId v, int heads, bool causal,
                         const std::string& name) {
  OpParams p;
  p.heads = heads;
  p.causal = causal;
  return op(OpKind::ATTENTION, p, {q, k, v}, name);
}

ValueId Graph::rms_norm(ValueId x, ValueId w, float eps, const std::string& name) {
  OpParams p;
  p.eps = eps;
  std::vector<ValueId> in{x};
  if (w != kNoValue) in.push_back(w);
  return op(OpKind::RMS_NORM, p, std::move(in), name);
}

ValueId Graph::qkv_rope(std::span<const QkvStream> streams, ValueId cs, int heads, int head_dim,
                        float eps, bool half_split, const std::string& name) {
  OpParams p;
  p.heads = heads;
  p.dim = head_dim;
  p.eps = eps;
  p.rope_half_split = half_split;
  std::vector<ValueId> in;
  for (const QkvStream& s : streams) in.insert(in.end(), {s.x, s.gq, s.gk});
  in.push_back(cs);
  return op(OpKind::QKV_ROPE, p, std::move(in), name);
}

ValueId Graph::attention_packed(ValueId qkv, int heads, const std::string& name) {
  const int64_t c = shape(qkv)[-1] / 3;
  OpParams p;
  p.heads = heads;
  p.kv_window = true;
  p.start = c;
  p.end = 2 * c;
  p.q_start = 0;
  p.q_width = c;
  return op(OpKind::ATTENTION, p, {qkv, qkv, qkv}, name);
}

ValueId Graph::rope(ValueId x, ValueId cs, bool half_split, const std::string& name) {
  OpParams p;
  p.rope_half_split = half_split;
  return op(OpKind::ROPE, p, {x, cs}, name);
}

ValueId Graph::unary(OpKind kind, ValueId x, const std::string& name) {
  return op(kind, OpParams{}, {x}, name);
}

ValueId Graph::binary(OpKind kind, ValueId a, ValueId b, const std::string& name) {
  return op(kind, OpParams{}, {a, b}, name);
}

ValueId Graph::scale(ValueId x, float alpha, float beta, const std::string& name) {
  OpParams p;
  p.alpha = alpha;
  p.beta = beta;
  return op(OpKind::SCALE, p, {x}, name);
}

ValueId Graph::concat(std::vector<ValueId> xs, int axis, const std::string& name) {
  OpParams p;
  p.axis = axis;
  return op(OpKind::CONCAT, p, std::move(xs), name);
}

ValueId Graph::slice(ValueId x, int axis, int64_t start, int64_t end, int64_t step,
                     const std::string& name) {
  OpParams p;
  p.axis = axis;
  p.start = start;
  p.end = end;
  p.step = step;
  return op(OpKind::SLICE, p, {x}, name);
}

ValueId Graph::permute(ValueId x, std::initializer_list<int> perm, const std::string& name) {
  OpParams p;
  if (perm.size() > size_t(kMaxDims)) {
    fail(make_error(ErrorCode::INVALID_ARGUMENT, "{}: permute: {} dims exceed the maximum {}",
                    name, perm.size(), kMaxDims));
    return kNoValue;
  }
  int i = 0;
  for (int d : perm) p.perm[i++] = d;
  return op(OpKind::PERMUTE, p, {x}, name);
}

ValueId Graph::reshape(ValueId x, Shape shape, const std::string& name) {
  OpParams p;
  p.shape = shape;
  return op(OpKind::RESHAPE, p, {x}, name);
}

ValueId Graph::cast(ValueId x, DType dtype, const std::string& name) {
  OpParams p;
  p.dtype = dtype;
  return op(OpKind::CAST, p, {x}, name);
}

namespace {

// Floats by bit pattern so that the key separates values that print alike (and -0 from 0).
uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

void append_desc(std::string& s, const TensorDesc& d) {
  s += dtype_name(d.dtype);
  s += d.shape.str();
}

void append_params(std::string& s, const OpParams& p) {
  fmt::format_to(std::back_inserter(s),
                 "{{{:x} {:x} {:x} g{} h{} a{} f{} d{} s{},{} p{},{},{},{} dl{},{} perm", float_bits(p.eps),
                 float_bits(p.alpha), float_bits(p.beta), p.groups, p.heads, p.axis, p.factor, p.dim,
                 p.stride[0], p.stride[1], p.pad[0], p.pad[1], p.pad[2], p.pad[3], p.dilation[0],
                 p.dilation[1]);
  for (int i = 0; i < kMaxDims; ++i) fmt::format_to(std::back_inserter(s), ",{}", p.perm[i]);
  fmt::format_to(std::back_inserter(s), " r{}:{}:{} mp{:x} fs{:x} {}{}{}{}{}{}{} ", p.start, p.end,
                 p.step, float_bits(p.max_period), float_bits(p.freq_shift), int(p.flip_sin_to_cos),
                 int(p.causal), int(p.fuse_silu), int(p.trans_b), int(p.channels_last),
                 int(p.add_input), dtype_name(p.dtype));
  if (p.kv_window) fmt::format_to(std::back_inserter(s), "kvw q{}+{} ", p.q_start, p.q_width);
  if (p.rope_half_split) s += "rhs ";
  if (p.weight_scale) s += "ws ";
  s += p.shape.str();
  s += '}';
}

}  // namespace

// Note [structure key]
// The key spells out everything a plan or a run depends on, appended as the graph is built
// (so asking for it costs nothing): each input and weight (kind, descriptor, weight layout,
// binding name), each node (op, exact parameters - all fields, floats by bits, not only
// OpParams::str -, inputs, output descriptor and name) and each output mark with its name.
// Building is append-only, so this record determines the graph. Names carry a length prefix
// so that no two different graphs print the same key.
void Graph::key_value(ValueId id) {
  const Value& v = values_[size_t(id)];
  key_ += "IWM"[int(v.kind)];
  append_desc(key_, v.desc);
  if (v.kind == ValueKind::WEIGHT && v.layout != WeightLayout::STORED)
    fmt::format_to(std::back_inserter(key_), "L{}", int(v.layout));
  fmt::format_to(std::back_inserter(key_), "#{}:{};", v.name.size(), v.name);
}

void Graph::key_node(const Node& n) {
  key_ += op_name(n.kind);
  append_params(key_, n.params);
  for (ValueId v : n.inputs) fmt::format_to(std::back_inserter(key_), "{},", v);
  key_ += '>';
  append_desc(key_, values_[size_t(n.output)].desc);
  fmt::format_to(std::back_inserter(key_), "#{}:{};", n.name.size(), n.name);
}

}  // namespace hr
