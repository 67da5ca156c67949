// The graph builder: values, nodes, shape inference through op_infer, the first-error status,
// RESHAPE views and the exact structure key that plan caches use.
#include "graph/graph.h"

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
  return id;
}

ValueId Graph::weight(const std::string& name, TensorDesc desc) {
  auto it = weights_by_name_.find(name);
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
  ValueId id = add_value(std::move(v));
  weights_by_name_[name] = id;
  return id;
}

ValueId Graph::find_input(const std::string& name) const {
  auto it = inputs_by_name_.find(name);
  return it == inputs_by_name_.end() ? kNoValue : it->second;
}

ValueId Graph::find_weight(const std::string& name) const {
  auto it = weights_by_name_.find(name);
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
  fmt::format_to(std::back_inserter(s), " r{}:{}:{} mp{:x} fs{:x} {}{}{}{}{} ", p.start, p.end,
                 p.step, float_bits(p.max_period), float_bits(p.freq_shift), int(p.flip_sin_to_cos),
                 int(p.causal), int(p.fuse_silu), int(p.trans_b), dtype_name(p.dtype));
  s += p.shape.str();
  s += '}';
}

}  // namespace

// Note [structure key]
// The key spells out everything a plan or a run depends on: each value's kind, descriptor,
// binding name, view source and output mark (with its name), and each node's op, exact
// parameters (all fields, floats by bits, not only OpParams::str), inputs and name. Names
// are separated by a length prefix so that no two different graphs print the same key.
std::string Graph::structure_key() const {
  std::string s;
  s.reserve(64 * (values_.size() + nodes_.size()));
  fmt::format_to(std::back_inserter(s), "v{}n{};", values_.size(), nodes_.size());
  for (const Value& v : values_) {
    s += "IWM"[int(v.kind)];
    append_desc(s, v.desc);
    if (v.kind != ValueKind::INTERMEDIATE || v.is_output)
      fmt::format_to(std::back_inserter(s), "#{}:{}", v.name.size(), v.name);
    if (v.view_of != kNoValue) fmt::format_to(std::back_inserter(s), "@{}", v.view_of);
    s += v.is_output ? "!;" : ";";
  }
  s += "|o";
  for (ValueId o : outputs_) fmt::format_to(std::back_inserter(s), ",{}", o);
  s += "|";
  for (const Node& n : nodes_) {
    s += op_name(n.kind);
    append_params(s, n.params);
    for (ValueId v : n.inputs) fmt::format_to(std::back_inserter(s), "{},", v);
    fmt::format_to(std::back_inserter(s), ">{}#{}:{};", n.output, n.name.size(), n.name);
  }
  return s;
}

}  // namespace hr
