// Text conditioning nodes: CLIPTextEncode, CLIPSetLastLayer, ConditioningCombine,
// ConditioningZeroOut, CLIPTextEncodeSDXL(Refiner), CLIPTextEncodeFlux.
#include <map>

#include "nodes/nodes.h"
#include "nodes/values.h"
#include "workflow/execute.h"

namespace hr {
namespace {

Result<const CLIPValue*> clip_of(const NodeInputs& in) {
  auto clip = in.get<std::shared_ptr<const CLIPValue>>("clip");
  if (!clip || !*clip || !(*clip)->encoder)
    return make_error(ErrorCode::INVALID_ARGUMENT,
                      "clip input is invalid: the checkpoint has no text encoder");
  return clip->get();
}

bool has_part(const TextEncoder& enc, const char* part) {
  for (const std::string& p : enc.parts())
    if (p == part) return true;
  return false;
}

// Encodes `texts` and sets the node's extras on the entry (Note [model families]: the keys are
// ComfyUI's, read by the family's diffusion model).
Result<std::vector<std::any>> cond_out(ExecContext& ctx, const CLIPValue& c,
                                       const std::map<std::string, std::string>& texts,
                                       const std::vector<std::pair<const char*, CondExtras::Value>>& extras) {
  HR_ASSIGN_OR_RETURN(CondEntry e, c.encoder->encode(*ctx.opts.executor, texts, c.layer, c.sources()));
  for (const auto& [key, value] : extras) e.extras.set(key, value);
  Conditioning cond;
  cond.entries.push_back(std::move(e));
  return std::vector<std::any>{std::make_shared<const Conditioning>(std::move(cond))};
}

// zeros_like of the entry's tensor extra `key`, when it holds a tensor.
void zero_extra(CondExtras& extras, const char* key) {
  const HostTensor* t = extras.tensor(key);
  if (t) extras.set(key, std::make_shared<const HostTensor>(t->dtype(), t->shape()));
}

// nodes.py ConditioningZeroOut.zero_out: per entry, zeros like the context, and like
// pooled_output and conditioning_lyrics where they are set (not None); other keys are kept.
NodeDef zero_out_node() {
  NodeDef z;
  z.class_type = "ConditioningZeroOut";
  z.category = "advanced/conditioning";
  z.inputs = {spec_link("conditioning", IoType::CONDITIONING)};
  z.outputs = {{IoType::CONDITIONING, "CONDITIONING"}};
  z.run = [](ExecContext&, const NodeInputs& in) -> Result<std::vector<std::any>> {
    auto c = in.get<std::shared_ptr<const Conditioning>>("conditioning");
    if (!c || !*c) return make_error(ErrorCode::INVALID_ARGUMENT, "conditioning input missing");
    Conditioning out = **c;
    for (CondEntry& e : out.entries) {
      if (e.cond) e.cond = std::make_shared<const HostTensor>(e.cond->dtype(), e.cond->shape());
      zero_extra(e.extras, kCondPooledOutput);
      zero_extra(e.extras, "conditioning_lyrics");
    }
    return std::vector<std::any>{std::make_shared<const Conditioning>(std::move(out))};
  };
  return z;
}

}  // namespace

void nodes_register_conditioning(NodeRegistry& r, const NodeEnv&) {
  NodeDef enc;
  enc.class_type = "CLIPTextEncode";
  enc.display_name = "CLIP Text Encode (Prompt)";
  enc.category = "conditioning";
  enc.inputs = {spec_string("text", "", true), spec_link("clip", IoType::CLIP)};
  enc.outputs = {{IoType::CONDITIONING, "CONDITIONING"}};
  enc.run = [](ExecContext& ctx, const NodeInputs& in) -> Result<std::vector<std::any>> {
    HR_ASSIGN_OR_RETURN(const CLIPValue* c, clip_of(in));
    return cond_out(ctx, *c, text_parts_all(*c->encoder, in.get_string("text")), {});
  };
  r.add(enc);

  NodeDef last;
  last.class_type = "CLIPSetLastLayer";
  last.category = "conditioning";
  last.inputs = {spec_link("clip", IoType::CLIP), spec_int("stop_at_clip_layer", -1, -24, -1)};
  last.outputs = {{IoType::CLIP, "CLIP"}};
  last.run = [](ExecContext&, const NodeInputs& in) -> Result<std::vector<std::any>> {
    auto clip = in.get<std::shared_ptr<const CLIPValue>>("clip");
    if (!clip || !*clip) return make_error(ErrorCode::INVALID_ARGUMENT, "clip input is invalid");
    CLIPValue c = **clip;  // shares the encoders' weights
    c.layer = int(in.get_int("stop_at_clip_layer"));
    return std::vector<std::any>{std::make_shared<const CLIPValue>(std::move(c))};
  };
  r.add(last);

  NodeDef comb;
  comb.class_type = "ConditioningCombine";
  comb.display_name = "Conditioning (Combine)";
  comb.category = "conditioning";
  comb.inputs = {spec_link("conditioning_1", IoType::CONDITIONING),
                 spec_link("conditioning_2", IoType::CONDITIONING)};
  comb.outputs = {{IoType::CONDITIONING, "CONDITIONING"}};
  comb.run = [](ExecContext&, const NodeInputs& in) -> Result<std::vector<std::any>> {
    auto a = in.get<std::shared_ptr<const Conditioning>>("conditioning_1");
    auto b = in.get<std::shared_ptr<const Conditioning>>("conditioning_2");
    if (!a || !b) return make_error(ErrorCode::INVALID_ARGUMENT, "conditioning input missing");
    Conditioning c = **a;
    c.entries.insert(c.entries.end(), (*b)->entries.begin(), (*b)->entries.end());
    return std::vector<std::any>{std::make_shared<const Conditioning>(std::move(c))};
  };
  r.add(comb);

  r.add(zero_out_node());

  NodeDef xl;
  xl.class_type = "CLIPTextEncodeSDXL";
  xl.category = "advanced/conditioning";
  xl.inputs = {spec_link("clip", IoType::CLIP),
               spec_int("width", 1024, 0, kMaxResolution),
               spec_int("height", 1024, 0, kMaxResolution),
               spec_int("crop_w", 0, 0, kMaxResolution),
               spec_int("crop_h", 0, 0, kMaxResolution),
               spec_int("target_width", 1024, 0, kMaxResolution),
               spec_int("target_height", 1024, 0, kMaxResolution),
               spec_string("text_g", "", true),
               spec_string("text_l", "", true)};
  xl.outputs = {{IoType::CONDITIONING, "CONDITIONING"}};
  xl.run = [](ExecContext& ctx, const NodeInputs& in) -> Result<std::vector<std::any>> {
    HR_ASSIGN_OR_RETURN(const CLIPValue* c, clip_of(in));
    if (c->encoder->parts().size() != 2 || !has_part(*c->encoder, "l") ||
        !has_part(*c->encoder, "g"))
      return make_error(ErrorCode::INVALID_ARGUMENT, "CLIPTextEncodeSDXL needs an SDXL clip (CLIP-L + bigG)");
    return cond_out(ctx, *c, {{"l", in.get_string("text_l")}, {"g", in.get_string("text_g")}},
                    {{kCondWidth, in.get_int("width")},
                     {kCondHeight, in.get_int("height")},
                     {kCondCropW, in.get_int("crop_w")},
                     {kCondCropH, in.get_int("crop_h")},
                     {kCondTargetWidth, in.get_int("target_width")},
                     {kCondTargetHeight, in.get_int("target_height")}});
  };
  r.add(xl);

  NodeDef rf;
  rf.class_type = "CLIPTextEncodeSDXLRefiner";
  rf.category = "advanced/conditioning";
  rf.inputs = {spec_float("ascore", 6.0, 0.0, 1000.0, 0.01), spec_int("width", 1024, 0, kMaxResolution),
               spec_int("height", 1024, 0, kMaxResolution), spec_string("text", "", true),
               spec_link("clip", IoType::CLIP)};
  rf.outputs = {{IoType::CONDITIONING, "CONDITIONING"}};
  rf.run = [](ExecContext& ctx, const NodeInputs& in) -> Result<std::vector<std::any>> {
    HR_ASSIGN_OR_RETURN(const CLIPValue* c, clip_of(in));
    // The refiner encodes with bigG alone (the "g" part), whatever else the clip holds.
    if (!has_part(*c->encoder, "g"))
      return make_error(ErrorCode::INVALID_ARGUMENT, "CLIPTextEncodeSDXLRefiner needs an OpenCLIP bigG clip");
    return cond_out(ctx, *c, {{"g", in.get_string("text")}},
                    {{kCondWidth, in.get_int("width")},
                     {kCondHeight, in.get_int("height")},
                     {kCondAestheticScore, in.get_float("ascore")}});
  };
  r.add(rf);

  // comfy_extras/nodes_flux.py: every part gets clip_l's text (clip.tokenize(clip_l)) except
  // "t5xxl", which gets t5xxl's; the entry carries the guidance.
  NodeDef fx;
  fx.class_type = "CLIPTextEncodeFlux";
  fx.category = "advanced/conditioning/flux";
  fx.inputs = {spec_link("clip", IoType::CLIP), spec_string("clip_l", "", true),
               spec_string("t5xxl", "", true), spec_float("guidance", 3.5, 0.0, 100.0, 0.1)};
  fx.outputs = {{IoType::CONDITIONING, "CONDITIONING"}};
  fx.run = [](ExecContext& ctx, const NodeInputs& in) -> Result<std::vector<std::any>> {
    HR_ASSIGN_OR_RETURN(const CLIPValue* c, clip_of(in));
    if (!has_part(*c->encoder, "t5xxl"))
      return make_error(ErrorCode::INVALID_ARGUMENT,
                        "CLIPTextEncodeFlux needs a clip with a T5-XXL encoder (Flux's: "
                        "DualCLIPLoader type flux, or a Flux checkpoint)");
    auto texts = text_parts_all(*c->encoder, in.get_string("clip_l"));
    texts["t5xxl"] = in.get_string("t5xxl");
    return cond_out(ctx, *c, texts, {{kCondGuidance, in.get_float("guidance")}});
  };
  r.add(fx);
}

}  // namespace hr
