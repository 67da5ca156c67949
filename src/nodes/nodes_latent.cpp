// Latent nodes that reshape, combine and batch latents: LatentComposite, LatentCompositeMasked,
// LatentBlend, LatentCrop, LatentFlip, LatentRotate, LatentBatch, RepeatLatentBatch,
// LatentFromBatch, LatentAdd, LatentSubtract, LatentMultiply (ComfyUI a125cd84: nodes.py,
// comfy_extras/nodes_latent.py, comfy_extras/nodes_mask.py).
#include <algorithm>
#include <numeric>

#include "models/conditioning.h"
#include "nodes/latent_ops.h"
#include "nodes/nodes.h"
#include "nodes/resample.h"
#include "nodes/values.h"
#include "workflow/execute.h"

namespace hr {
namespace {

using Outputs = Result<std::vector<std::any>>;

std::shared_ptr<const HostTensor> share(HostTensor t) {
  return std::make_shared<const HostTensor>(std::move(t));
}

Result<const Latent*> latent_in(const NodeInputs& in, const std::string& name) {
  auto l = in.get<std::shared_ptr<const Latent>>(name);
  if (!l || !*l || !(*l)->samples)
    return make_error(ErrorCode::INVALID_ARGUMENT, "{} input is not a latent", name);
  const HostTensor& s = *(*l)->samples;
  if (s.dtype() != DType::F32 || s.shape().rank != 4)
    return make_error(ErrorCode::UNSUPPORTED, "{}: latent {} is not an F32 [B, C, H, W] tensor",
                      name, s.shape().str());
  return l->get();
}

// Note [latent dict copy]: ComfyUI's latent nodes start from `samples.copy()`, so every key
// they do not rewrite (batch_index, noise_mask) passes through from the first latent input.
std::vector<std::any> latent_out(Latent like, HostTensor samples) {
  like.samples = share(std::move(samples));
  return {std::make_shared<const Latent>(std::move(like))};
}

std::vector<int64_t> batch_index_or_range(const Latent& l) {
  if (!l.batch_index.empty()) return l.batch_index;
  std::vector<int64_t> r(size_t(l.samples->shape()[0]));
  std::iota(r.begin(), r.end(), 0);
  return r;
}

NodeDef latent_node(const char* cls, const char* display, const char* category,
                    std::vector<InputSpec> inputs) {
  NodeDef d;
  d.class_type = cls;
  d.display_name = display;
  d.category = category;
  d.inputs = std::move(inputs);
  d.outputs = {{IoType::LATENT, "LATENT"}};
  return d;
}

// A pixel size or position: nodes.py's ("INT", {"min": .., "max": MAX_RESOLUTION, "step": 8}).
InputSpec spec_pixels(const char* name, double def, double min) {
  return spec_int(name, def, min, kMaxResolution, 8);
}

NodeDef composite_node() {
  NodeDef d = latent_node(
      "LatentComposite", "Latent Composite", "latent",
      {spec_link("samples_to", IoType::LATENT), spec_link("samples_from", IoType::LATENT),
       spec_pixels("x", 0, 0), spec_pixels("y", 0, 0), spec_pixels("feather", 0, 0)});
  d.run = [](ExecContext&, const NodeInputs& in) -> Outputs {
    HR_ASSIGN_OR_RETURN(const Latent* to, latent_in(in, "samples_to"));
    HR_ASSIGN_OR_RETURN(const Latent* from, latent_in(in, "samples_from"));
    HR_ASSIGN_OR_RETURN(
        HostTensor s,
        latent_composite(*to->samples, *from->samples, py_floor_div(in.get_int("x"), 8),
                         py_floor_div(in.get_int("y"), 8), py_floor_div(in.get_int("feather"), 8)));
    return latent_out(*to, std::move(s));
  };
  return d;
}

NodeDef composite_masked_node() {
  InputSpec resize{.name = "resize_source", .type = IoType::BOOLEAN};
  InputSpec mask = spec_link("mask", IoType::MASK);
  mask.required = false;
  NodeDef d =
      latent_node("LatentCompositeMasked", "LatentCompositeMasked", "latent",
                  {spec_link("destination", IoType::LATENT), spec_link("source", IoType::LATENT),
                   spec_pixels("x", 0, 0), spec_pixels("y", 0, 0), resize, mask});
  d.run = [](ExecContext&, const NodeInputs& in) -> Outputs {
    HR_ASSIGN_OR_RETURN(const Latent* dest, latent_in(in, "destination"));
    HR_ASSIGN_OR_RETURN(const Latent* src, latent_in(in, "source"));
    const HostTensor* mask = nullptr;
    if (in.linked("mask")) {
      auto m = in.get<std::shared_ptr<const MaskValue>>("mask");
      if (!m || !*m || !(*m)->mask)
        return make_error(ErrorCode::INVALID_ARGUMENT, "mask input is not a mask");
      mask = (*m)->mask.get();
    }
    HR_ASSIGN_OR_RETURN(
        HostTensor s, latent_composite_masked(*dest->samples, *src->samples, in.get_int("x"),
                                              in.get_int("y"), mask, in.get_bool("resize_source")));
    return latent_out(*dest, std::move(s));
  };
  return d;
}

NodeDef blend_node() {
  NodeDef d =
      latent_node("LatentBlend", "Latent Blend", "_for_testing",
                  {spec_link("samples1", IoType::LATENT), spec_link("samples2", IoType::LATENT),
                   spec_float("blend_factor", 0.5, 0, 1, 0.01)});
  d.run = [](ExecContext&, const NodeInputs& in) -> Outputs {
    HR_ASSIGN_OR_RETURN(const Latent* l1, latent_in(in, "samples1"));
    HR_ASSIGN_OR_RETURN(const Latent* l2, latent_in(in, "samples2"));
    const HostTensor &s1 = *l1->samples, &s2 = *l2->samples;
    // nodes.py LatentBlend: any shape difference (batch included) resizes samples2 bicubic,
    // centre-cropped, to samples1's H x W; the batch then broadcasts.
    HostTensor b = s2.clone();
    if (s1.shape() != s2.shape()) {
      HR_ASSIGN_OR_RETURN(b, common_upscale(s2, s1.shape()[3], s1.shape()[2], "bicubic", "center"));
    }
    const double f = in.get_float("blend_factor");
    const float k1 = float(f), k2 = float(1.0 - f);
    HR_ASSIGN_OR_RETURN(HostTensor s, latent_broadcast(s1, b, [k1, k2](float x, float y) {
                          const float a = x * k1, c = y * k2;
                          return a + c;
                        }));
    return latent_out(*l1, std::move(s));
  };
  return d;
}

NodeDef crop_node() {
  NodeDef d =
      latent_node("LatentCrop", "Crop Latent", "latent/transform",
                  {spec_link("samples", IoType::LATENT), spec_pixels("width", 512, 64),
                   spec_pixels("height", 512, 64), spec_pixels("x", 0, 0), spec_pixels("y", 0, 0)});
  d.run = [](ExecContext&, const NodeInputs& in) -> Outputs {
    HR_ASSIGN_OR_RETURN(const Latent* l, latent_in(in, "samples"));
    const Shape& s = l->samples->shape();
    // nodes.py LatentCrop: the origin stays 8 latent pixels inside the far edges; the size is
    // what Python's slice leaves.
    const int64_t x = std::min(py_floor_div(in.get_int("x"), 8), s[3] - 8);
    const int64_t y = std::min(py_floor_div(in.get_int("y"), 8), s[2] - 8);
    const int64_t w = py_floor_div(in.get_int("width"), 8),
                  h = py_floor_div(in.get_int("height"), 8);
    return latent_out(*l,
                      latent_rect(*l->samples, py_slice(y, y + h, s[2]), py_slice(x, x + w, s[3])));
  };
  return d;
}

NodeDef flip_node() {
  NodeDef d =
      latent_node("LatentFlip", "Flip Latent", "latent/transform",
                  {spec_link("samples", IoType::LATENT),
                   spec_combo("flip_method", {"x-axis: vertically", "y-axis: horizontally"})});
  d.run = [](ExecContext&, const NodeInputs& in) -> Outputs {
    HR_ASSIGN_OR_RETURN(const Latent* l, latent_in(in, "samples"));
    const std::string m = in.get_string("flip_method");
    if (m.starts_with("x")) return latent_out(*l, latent_flip(*l->samples, 2));
    if (m.starts_with("y")) return latent_out(*l, latent_flip(*l->samples, 3));
    return latent_out(*l, l->samples->clone());
  };
  return d;
}

NodeDef rotate_node() {
  NodeDef d =
      latent_node("LatentRotate", "Rotate Latent", "latent/transform",
                  {spec_link("samples", IoType::LATENT),
                   spec_combo("rotation", {"none", "90 degrees", "180 degrees", "270 degrees"})});
  d.run = [](ExecContext&, const NodeInputs& in) -> Outputs {
    HR_ASSIGN_OR_RETURN(const Latent* l, latent_in(in, "samples"));
    const std::string r = in.get_string("rotation");
    const int k = r.starts_with("90") ? 1 : r.starts_with("180") ? 2 : r.starts_with("270") ? 3 : 0;
    return latent_out(*l, latent_rot90(*l->samples, k));
  };
  return d;
}

NodeDef batch_node() {
  NodeDef d =
      latent_node("LatentBatch", "LatentBatch", "latent/batch",
                  {spec_link("samples1", IoType::LATENT), spec_link("samples2", IoType::LATENT)});
  d.run = [](ExecContext&, const NodeInputs& in) -> Outputs {
    HR_ASSIGN_OR_RETURN(const Latent* l1, latent_in(in, "samples1"));
    HR_ASSIGN_OR_RETURN(const Latent* l2, latent_in(in, "samples2"));
    HR_ASSIGN_OR_RETURN(HostTensor s2,
                        latent_reshape_to(l1->samples->shape(), *l2->samples, false));
    HR_ASSIGN_OR_RETURN(HostTensor s, latent_batch_concat(*l1->samples, s2));
    Latent out = *l1;
    out.batch_index = batch_index_or_range(*l1);
    for (int64_t i : batch_index_or_range(*l2)) out.batch_index.push_back(i);
    return latent_out(std::move(out), std::move(s));
  };
  return d;
}

NodeDef repeat_node() {
  NodeDef d = latent_node("RepeatLatentBatch", "Repeat Latent Batch", "latent/batch",
                          {spec_link("samples", IoType::LATENT), spec_int("amount", 1, 1, 64)});
  d.run = [](ExecContext&, const NodeInputs& in) -> Outputs {
    HR_ASSIGN_OR_RETURN(const Latent* l, latent_in(in, "samples"));
    const int64_t n = in.get_int("amount");
    Latent out = *l;
    // nodes.py repeats a batched noise_mask `amount` times (a mask of batch 1 broadcasts).
    if (l->noise_mask && l->noise_mask->shape()[0] > 1)
      out.noise_mask = share(latent_batch_repeat(*l->noise_mask, n));
    if (!l->batch_index.empty()) {
      const auto [lo, hi] = std::minmax_element(l->batch_index.begin(), l->batch_index.end());
      const int64_t offset = *hi - *lo + 1;
      for (int64_t i = 1; i < n; ++i)
        for (int64_t x : l->batch_index) out.batch_index.push_back(x + i * offset);
    }
    return latent_out(std::move(out), latent_batch_repeat(*l->samples, n));
  };
  return d;
}

// nodes.py LatentFromBatch's noise_mask: one mask serves every latent; a batch of masks is
// tiled to the latent batch, then sliced like the samples.
std::shared_ptr<const HostTensor> mask_from_batch(const HostTensor& m, int64_t batch, int64_t begin,
                                                  int64_t n) {
  if (m.shape()[0] == 1) return share(m.clone());
  HostTensor t = m.shape()[0] < batch ? latent_repeat_to_batch(m, batch) : m.clone();
  const PySlice s = py_slice(begin, begin + n, t.shape()[0]);
  return share(tensor_rows0(t, s.begin, s.size()));
}

NodeDef from_batch_node() {
  NodeDef d = latent_node("LatentFromBatch", "Latent From Batch", "latent/batch",
                          {spec_link("samples", IoType::LATENT), spec_int("batch_index", 0, 0, 63),
                           spec_int("length", 1, 1, 64)});
  d.run = [](ExecContext&, const NodeInputs& in) -> Outputs {
    HR_ASSIGN_OR_RETURN(const Latent* l, latent_in(in, "samples"));
    const int64_t b = l->samples->shape()[0];
    const int64_t begin = std::min(b - 1, in.get_int("batch_index"));
    const int64_t n = std::min(b - begin, in.get_int("length"));
    Latent out = *l;
    if (l->noise_mask) out.noise_mask = mask_from_batch(*l->noise_mask, b, begin, n);
    if (l->batch_index.empty()) {
      out.batch_index.resize(size_t(n));
      std::iota(out.batch_index.begin(), out.batch_index.end(), begin);
    } else {
      const PySlice s = py_slice(begin, begin + n, int64_t(l->batch_index.size()));
      out.batch_index.assign(l->batch_index.begin() + s.begin, l->batch_index.begin() + s.end);
    }
    return latent_out(std::move(out), tensor_rows0(*l->samples, begin, n));
  };
  return d;
}

// LatentAdd / LatentSubtract: samples2 reshaped to samples1 (reshape_latent_to), then combined.
NodeDef arithmetic_node(const char* cls, float sign) {
  NodeDef d =
      latent_node(cls, cls, "latent/advanced",
                  {spec_link("samples1", IoType::LATENT), spec_link("samples2", IoType::LATENT)});
  d.run = [sign](ExecContext&, const NodeInputs& in) -> Outputs {
    HR_ASSIGN_OR_RETURN(const Latent* l1, latent_in(in, "samples1"));
    HR_ASSIGN_OR_RETURN(const Latent* l2, latent_in(in, "samples2"));
    HR_ASSIGN_OR_RETURN(HostTensor s2, latent_reshape_to(l1->samples->shape(), *l2->samples, true));
    HR_ASSIGN_OR_RETURN(HostTensor s, latent_broadcast(*l1->samples, s2, [sign](float a, float b) {
                          return sign > 0 ? a + b : a - b;
                        }));
    return latent_out(*l1, std::move(s));
  };
  return d;
}

NodeDef multiply_node() {
  NodeDef d = latent_node(
      "LatentMultiply", "LatentMultiply", "latent/advanced",
      {spec_link("samples", IoType::LATENT), spec_float("multiplier", 1.0, -10.0, 10.0, 0.01)});
  d.run = [](ExecContext&, const NodeInputs& in) -> Outputs {
    HR_ASSIGN_OR_RETURN(const Latent* l, latent_in(in, "samples"));
    const float k = float(in.get_float("multiplier"));
    HostTensor s = l->samples->clone();
    for (int64_t i = 0; i < s.numel(); ++i) s.f32()[i] *= k;
    return latent_out(*l, std::move(s));
  };
  return d;
}

}  // namespace

void nodes_register_latent(NodeRegistry& r, const NodeEnv&) {
  r.add(composite_node());
  r.add(composite_masked_node());
  r.add(blend_node());
  r.add(crop_node());
  r.add(flip_node());
  r.add(rotate_node());
  r.add(batch_node());
  r.add(repeat_node());
  r.add(from_batch_node());
  r.add(arithmetic_node("LatentAdd", 1));
  r.add(arithmetic_node("LatentSubtract", -1));
  r.add(multiply_node());
}

}  // namespace hr
