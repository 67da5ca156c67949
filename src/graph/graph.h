// The compute-graph IR: nodes in execution order over values with concrete tensor
// descriptors. Values are runtime inputs, weights (named, bound at execution time so their
// placement can change without rebuilding the graph) or intermediates produced by one node.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backend/op.h"
#include "core/status.h"
#include "core/tensor.h"

namespace hr {

using ValueId = int32_t;
constexpr ValueId kNoValue = -1;

enum class ValueKind : uint8_t { INPUT, WEIGHT, INTERMEDIATE };

// How a weight is laid out in memory relative to the checkpoint tensor of the same name
// (Note [weight layouts]): as stored, or a convolution filter [O, C, KH, KW] rearranged to
// [O, KH, KW, C] for channels-last convolutions. The weight source does the rearranging once,
// when it makes the weight resident.
//
// STACK (Note [stacked context projections] in pass_stack.cpp): the weight's name lists several
// checkpoint tensors joined by '+' (weight_stack_name), all [N_i, K...] of one dtype; the weight
// is them concatenated along dim 0, [sum N_i, K...]. A graph pass makes these so that one GEMM
// computes the projections of several layers that read the same input.
enum class WeightLayout : uint8_t { STORED = 0, CONV_OHWI = 1, STACK = 2 };
const char* weight_layout_name(WeightLayout l);
// Note [weight keys]: the one key of a weight in a layout, wherever copies are kept by name (the
// graph's weight values, a weight set's device, rearranged and page-locked copies): the name
// itself as stored, `name@layout` otherwise (the checkpoints' tensor names have no '@').
std::string weight_key(const std::string& name, WeightLayout layout);
// The name and layout a weight_key was made from.
std::pair<std::string, WeightLayout> weight_key_split(const std::string& key);
std::string weight_stack_name(const std::vector<std::string>& parts);
std::vector<std::string> weight_stack_parts(const std::string& name);
// The descriptor of the parts concatenated along dim 0; INVALID_ARGUMENT when dtypes or trailing
// dims differ.
Result<TensorDesc> weight_stack_desc(const std::vector<TensorDesc>& parts);
// The parts (all non-null) concatenated along dim 0 (weight_stack_desc's checks).
Result<HostTensor> weight_stack(const std::vector<const HostTensor*>& parts);

// Note [weight layouts]
// Graphs declare weights in the layout their ops read (a channels-last convolution reads its
// filter as [O, KH, KW, C/groups]); checkpoints store them one way. A WeightSource serves a
// (name, layout) pair by rearranging the stored tensor once (weight_relayout) and keeping that
// copy, so no graph spends time or arena memory on weight transposes.
//
// The descriptor of `stored` in `layout` (INVALID_ARGUMENT when the layout does not apply).
Result<TensorDesc> weight_layout_desc(const TensorDesc& stored, WeightLayout layout);
// `stored` rearranged into `layout`.
Result<HostTensor> weight_relayout(const HostTensor& stored, WeightLayout layout);

struct Value {
  TensorDesc desc;
  ValueKind kind = ValueKind::INTERMEDIATE;
  std::string name;        // inputs and weights: binding name; outputs: output name
  int32_t producer = -1;   // node index for intermediates
  bool is_output = false;
  // RESHAPE outputs are views: they alias the storage of `view_of` (always a non-view value,
  // resolved through chains of reshapes) and take no memory of their own. The planner keeps
  // that storage alive until the view's last use (Note [views] in planner.cpp).
  ValueId view_of = kNoValue;
  WeightLayout layout = WeightLayout::STORED;  // weights only
};

struct Node {
  OpKind kind = OpKind::COPY;
  OpParams params;
  std::vector<ValueId> inputs;
  ValueId output = kNoValue;
  std::string name;  // for plans and errors, e.g. "input_blocks.1.1.attn1"
};

// Builder and container. Shape errors do not abort building: the first one is kept in
// status() and later calls return kNoValue, so model code can build straight through and
// check once at the end.
// Note [fp8 weights]
// A checkpoint may store a weight in fp8 (F8_E4M3 / F8_E5M2), optionally with a per-tensor
// scale (ComfyUI's scaled fp8: `scale_weight`; `comfy_quant` files: `weight_scale`). The model
// declares the weight in its compute dtype as always; a graph given the storage map declares
// the stored bytes instead and reaches the compute dtype with one op: a CAST to the compute
// dtype that, for a scaled weight, also takes the scale (itself a weight, f32 {1}) and computes
// ComfyUI's dequantizing cast `weight.to(dtype) * scale_weight.to(dtype)` (the product of an fp8
// value and a 16-bit scale is exact in f32, so rounding once equals torch's two steps). So the
// plan counts fp8 bytes for residency and streaming, and the dequantized copy is an arena
// buffer that lives from the CAST to its reader. The channels-last pass moves a convolution's
// dequantizing CAST after the filter's rearrangement: the fp8 filter is bound as OHWI and
// dequantized straight into the layout the convolution reads (passes.h).
struct WeightStorage {
  DType dtype = DType::F32;  // as stored
  std::string scale;         // the scale weight's name ("" = none), f32 {1}
  bool fast = false;         // `_fast`: its linear layers may run as fp8 GEMMs (pass_fp8.cpp)
};
using WeightStorageMap = std::unordered_map<std::string, WeightStorage>;
// A digest of the map's content ("" for none or empty), for caches of built graphs.
std::string weight_storage_key(const WeightStorageMap* storage);

class Graph {
 public:
  // Input and weight names are unique; asking for a weight again by name with the same
  // descriptor returns the same value (shared weights), a different descriptor is an error.
  ValueId input(const std::string& name, TensorDesc desc);
  // A weight in another layout (WeightLayout) is a different value from the stored one;
  // `desc` is the descriptor in that layout.
  ValueId weight(const std::string& name, TensorDesc desc,
                 WeightLayout layout = WeightLayout::STORED);
  // Weights the map names are declared as stored (Note [fp8 weights]); set before the first
  // weight. A weight declared in its stored dtype is not converted.
  void set_weight_storage(std::shared_ptr<const WeightStorageMap> storage) {
    storage_ = std::move(storage);
  }
  const WeightStorageMap* weight_storage() const { return storage_.get(); }
  // Appends a node; infers the output descriptor with op_infer. An empty name becomes
  // "<op>.<node index>". RESHAPE nodes produce views (Value::view_of).
  ValueId op(OpKind kind, const OpParams& params, std::vector<ValueId> inputs,
             const std::string& name = "");
  void output(ValueId v, const std::string& name);

  // Convenience builders (all go through op()).
  ValueId linear(ValueId x, ValueId w, ValueId b = kNoValue, const std::string& name = "");
  ValueId conv2d(ValueId x, ValueId w, ValueId b, int stride, int pad,
                 const std::string& name = "");
  ValueId group_norm(ValueId x, ValueId g, ValueId b, int groups, float eps, bool silu,
                     const std::string& name = "");
  ValueId layer_norm(ValueId x, ValueId g, ValueId b, float eps, const std::string& name = "");
  ValueId attention(ValueId q, ValueId k, ValueId v, int heads, bool causal,
                    const std::string& name = "");
  // RMS_NORM over the last dim of x; w [C] or kNoValue (no weight). ComfyUI's eps: 1e-6 for
  // Flux's QK norm and T5's layer norm, the config's rms_norm_eps for Llama/Qwen.
  ValueId rms_norm(ValueId x, ValueId w, float eps, const std::string& name = "");
  // ROPE of x [B, L, H, D] by the f32 cos/sin table cs [L, D/2, 2] or [B, L, D/2, 2]
  // (models/rope_table.h builds it); half_split: pairs (p, p + D/2) (Llama/Qwen's rotate_half)
  // instead of Flux's (2p, 2p+1). ATTENTION's q and k [B, L, H*D] reshape to x and back as views.
  ValueId rope(ValueId x, ValueId cs, bool half_split, const std::string& name = "");
  // QKV_ROPE (backend/op.h): one stream per entry, each {x [B, L, >= 3C], gq [D], gk [D]}, their
  // tokens joined in order; cs [sum of L, D/2, 2] f32 -> [B, sum of L, 3C] holding q | k | v
  // with q and k RMS-normalised and rotated (eps, half_split as rms_norm's and rope's).
  struct QkvStream {
    ValueId x, gq, gk;
  };
  ValueId qkv_rope(std::span<const QkvStream> streams, ValueId cs, int heads, int head_dim,
                   float eps, bool half_split, const std::string& name = "");
  // ATTENTION over a packed [B, L, 3C] q | k | v (QKV_ROPE's output), read in place as windows.
  ValueId attention_packed(ValueId qkv, int heads, const std::string& name = "");
  ValueId unary(OpKind kind, ValueId x, const std::string& name = "");
  ValueId binary(OpKind kind, ValueId a, ValueId b, const std::string& name = "");
  ValueId add(ValueId a, ValueId b, const std::string& name = "") {
    return binary(OpKind::ADD, a, b, name);
  }
  ValueId mul(ValueId a, ValueId b, const std::string& name = "") {
    return binary(OpKind::MUL, a, b, name);
  }
  ValueId scale(ValueId x, float alpha, float beta = 0.0f, const std::string& name = "");
  ValueId concat(std::vector<ValueId> xs, int axis, const std::string& name = "");
  ValueId slice(ValueId x, int axis, int64_t start, int64_t end, int64_t step = 1,
                const std::string& name = "");
  ValueId permute(ValueId x, std::initializer_list<int> perm, const std::string& name = "");
  ValueId reshape(ValueId x, Shape shape, const std::string& name = "");
  ValueId cast(ValueId x, DType dtype, const std::string& name = "");

  const Status& status() const { return status_; }
  bool ok() const { return status_.ok(); }
  const std::vector<Value>& values() const { return values_; }
  const std::vector<Node>& nodes() const { return nodes_; }
  const Value& value(ValueId v) const { return values_[size_t(v)]; }
  const TensorDesc& desc(ValueId v) const { return values_[size_t(v)].desc; }
  const Shape& shape(ValueId v) const { return values_[size_t(v)].desc.shape; }
  std::vector<ValueId> outputs() const;
  // Weights: total bytes of all WEIGHT values.
  uint64_t weight_bytes() const;
  // A key equal for graphs with the same structure, ops, params and shapes (for plan caches).
  // Exact (not a hash): it spells out every node, parameter, descriptor and binding name.
  // Note [structure key] in graph.cpp; maintained while building.
  const std::string& structure_key() const { return key_; }
  // The storage a value lives in: itself, or for a RESHAPE view the value it aliases.
  ValueId storage_of(ValueId v) const {
    const Value& x = values_[size_t(v)];
    return x.view_of == kNoValue ? v : x.view_of;
  }
  // The value with this input/weight binding name, or kNoValue.
  ValueId find_input(const std::string& name) const;
  ValueId find_weight(const std::string& name,
                      WeightLayout layout = WeightLayout::STORED) const;

 private:
  ValueId add_value(Value v);
  void fail(Status s);
  void key_value(ValueId id);
  void key_node(const Node& n);
  std::string key_;
  std::vector<Value> values_;
  std::vector<Node> nodes_;
  std::vector<ValueId> outputs_;  // in marking order
  std::unordered_map<std::string, ValueId> inputs_by_name_;
  std::unordered_map<std::string, ValueId> weights_by_name_;
  std::shared_ptr<const WeightStorageMap> storage_;
  std::unordered_map<std::string, ValueId> dequantized_;  // by weight name
  ValueId weight_stored(const std::string& name, TensorDesc desc, const WeightStorage& s);
  Status status_;
};

}  // namespace hr
