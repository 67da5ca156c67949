// The base of the transformer families' graph builders (Flux, Z-Image): a Graph whose weights are
// named as in the file and stored as the config says, and the linear layer over them.
#pragma once

#include <memory>
#include <string>

#include "graph/graph.h"

namespace hr {

class DiTGraphBuilder {
 public:
  DiTGraphBuilder(std::shared_ptr<const WeightStorageMap> storage, DType dtype) : dt_(dtype) {
    g.set_weight_storage(std::move(storage));
  }

  Graph g;

 protected:
  // The weight `name` of shape `s` in the compute dtype (its storage from the map).
  ValueId w(const std::string& name, Shape s) { return g.weight(name, TensorDesc{dt_, s}); }
  // name.weight [out, in] and, with `bias`, name.bias [out].
  ValueId linear(ValueId x, const std::string& name, int64_t in, int64_t out, bool bias = true) {
    return g.linear(x, w(name + ".weight", {out, in}), bias ? w(name + ".bias", {out}) : kNoValue,
                    name);
  }

  DType dt_;
};

}  // namespace hr
