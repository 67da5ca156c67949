// comfy_extras/nodes_model_advanced.py's flow model-sampling patches: ModelSamplingSD3 (multiplier
// 1000) and ModelSamplingAuraFlow (multiplier 1: Lumina2, Z-Image); ModelSamplingFlux: nodes_flux.
#include "nodes/nodes.h"
#include "nodes/values.h"
#include "workflow/execute.h"

namespace hr {
namespace {

// ModelSamplingSD3.patch(model, shift, multiplier): a view of the model whose model sampling is
// ModelSamplingDiscreteFlow + CONST at that shift and multiplier. ComfyUI patches whatever model
// it is given, so does this node.
Result<std::vector<std::any>> flow_patch(const NodeInputs& in, double multiplier) {
  auto model = in.get<std::shared_ptr<const ModelValue>>("model");
  if (!model || !*model || !(*model)->model || !(*model)->model->diffusion)
    return make_error(ErrorCode::INVALID_ARGUMENT, "model input has no diffusion model loaded");
  ModelValue m = **model;  // shares the weights and the LoRA view
  ModelSamplingSpec spec;
  spec.kind = ModelSamplingSpec::Kind::FLOW;
  spec.shift = in.get_float("shift");
  spec.multiplier = multiplier;
  m.sampling = spec;
  return std::vector<std::any>{std::make_shared<const ModelValue>(std::move(m))};
}

NodeDef flow_node(const char* class_type, double default_shift, double multiplier) {
  NodeDef n;
  n.class_type = class_type;
  n.category = "advanced/model";
  n.inputs = {spec_link("model", IoType::MODEL),
              spec_float("shift", default_shift, 0.0, 100.0, 0.01)};
  n.outputs = {{IoType::MODEL, "MODEL"}};
  n.run = [multiplier](ExecContext&, const NodeInputs& in) -> Result<std::vector<std::any>> {
    return flow_patch(in, multiplier);
  };
  return n;
}

}  // namespace

void nodes_register_model_advanced(NodeRegistry& r, const NodeEnv&) {
  r.add(flow_node("ModelSamplingSD3", 3.0, 1000.0));
  r.add(flow_node("ModelSamplingAuraFlow", 1.73, 1.0));
}

}  // namespace hr
