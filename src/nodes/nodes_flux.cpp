// Flux's sampling-side nodes with ComfyUI's inputs: ModelSamplingFlux
// (comfy_extras/nodes_model_advanced.py), FluxGuidance and FluxDisableGuidance
// (comfy_extras/nodes_flux.py), EmptySD3LatentImage (comfy_extras/nodes_sd3.py).
#include "nodes/nodes.h"
#include "nodes/values.h"
#include "sampling/model_sampling.h"
#include "workflow/execute.h"

namespace hr {
namespace {

constexpr int kSD3LatentChannels = 16;  // SD3 and Flux latents

// ModelSamplingFlux.patch: a view of the model whose model sampling is ModelSamplingFlux with
// CONST at the shift of the image size. ComfyUI patches whatever model it is given (an SD UNet
// then gets flow timesteps in (0, 1] and gives noise); so does this node.
NodeDef model_sampling_flux_node() {
  NodeDef n;
  n.class_type = "ModelSamplingFlux";
  n.category = "advanced/model";
  n.inputs = {spec_link("model", IoType::MODEL),
              spec_float("max_shift", 1.15, 0.0, 100.0, 0.01),
              spec_float("base_shift", 0.5, 0.0, 100.0, 0.01),
              spec_int("width", 1024, 16, kMaxResolution, 8),
              spec_int("height", 1024, 16, kMaxResolution, 8)};
  n.outputs = {{IoType::MODEL, "MODEL"}};
  n.run = [](ExecContext&, const NodeInputs& in) -> Result<std::vector<std::any>> {
    auto model = in.get<std::shared_ptr<const ModelValue>>("model");
    if (!model || !*model || !(*model)->model || !(*model)->model->diffusion)
      return make_error(ErrorCode::INVALID_ARGUMENT, "model input has no diffusion model loaded");
    ModelValue m = **model;  // shares the weights and the LoRA view
    ModelSamplingSpec spec;
    spec.kind = ModelSamplingSpec::Kind::FLUX;
    spec.shift = flux_resolution_shift(in.get_float("max_shift"), in.get_float("base_shift"),
                                       in.get_int("width"), in.get_int("height"));
    m.sampling = spec;
    return std::vector<std::any>{std::make_shared<const ModelValue>(std::move(m))};
  };
  return n;
}

// node_helpers.conditioning_set_values(conditioning, {"guidance": value}).
Result<std::vector<std::any>> guidance_set(const NodeInputs& in, CondExtras::Value value) {
  auto c = in.get<std::shared_ptr<const Conditioning>>("conditioning");
  if (!c || !*c) return make_error(ErrorCode::INVALID_ARGUMENT, "conditioning input missing");
  Conditioning out = **c;
  for (CondEntry& e : out.entries) e.extras.set(kCondGuidance, value);
  return std::vector<std::any>{std::make_shared<const Conditioning>(std::move(out))};
}

NodeDef flux_guidance_node() {
  NodeDef n;
  n.class_type = "FluxGuidance";
  n.category = "advanced/conditioning/flux";
  n.inputs = {spec_link("conditioning", IoType::CONDITIONING),
              spec_float("guidance", kFluxGuidanceDefault, 0.0, 100.0, 0.1)};
  n.outputs = {{IoType::CONDITIONING, "CONDITIONING"}};
  n.run = [](ExecContext&, const NodeInputs& in) -> Result<std::vector<std::any>> {
    return guidance_set(in, in.get_float("guidance"));
  };
  return n;
}

NodeDef flux_disable_guidance_node() {
  NodeDef n;
  n.class_type = "FluxDisableGuidance";
  n.category = "advanced/conditioning/flux";
  n.description = "This node completely disables the guidance embed on Flux and Flux like models";
  n.inputs = {spec_link("conditioning", IoType::CONDITIONING)};
  n.outputs = {{IoType::CONDITIONING, "CONDITIONING"}};
  n.run = [](ExecContext&, const NodeInputs& in) -> Result<std::vector<std::any>> {
    return guidance_set(in, std::monostate{});
  };
  return n;
}

// torch.zeros([batch_size, 16, height // 8, width // 8]). ComfyUI does not hold the sizes to
// their step of 16, so neither does this node.
NodeDef empty_sd3_latent_node() {
  NodeDef n;
  n.class_type = "EmptySD3LatentImage";
  n.category = "latent/sd3";
  n.inputs = {spec_int("width", 1024, 16, kMaxResolution, 16),
              spec_int("height", 1024, 16, kMaxResolution, 16),
              spec_int("batch_size", 1, 1, 4096)};
  n.outputs = {{IoType::LATENT, "LATENT"}};
  n.run = [](ExecContext&, const NodeInputs& in) -> Result<std::vector<std::any>> {
    const int64_t b = in.get_int("batch_size"), h = in.get_int("height") / 8,
                  w = in.get_int("width") / 8;
    // Refuse what cannot be held on the host rather than abort.
    if (double(b) * double(h) * double(w) * kSD3LatentChannels * 4.0 > double(1ull << 36))
      return make_error(ErrorCode::INVALID_ARGUMENT, "latent batch {}x{}x{}x{} is too large", b,
                        kSD3LatentChannels, h, w);
    Latent l;
    l.samples = std::make_shared<const HostTensor>(DType::F32, Shape{b, kSD3LatentChannels, h, w});
    return std::vector<std::any>{std::make_shared<const Latent>(std::move(l))};
  };
  return n;
}

}  // namespace

void nodes_register_flux(NodeRegistry& r, const NodeEnv&) {
  r.add(model_sampling_flux_node());
  r.add(flux_guidance_node());
  r.add(flux_disable_guidance_node());
  r.add(empty_sd3_latent_node());
}

}  // namespace hr
