// Text conditioning nodes: CLIPTextEncode, CLIPSetLastLayer, ConditioningCombine.
#include "models/prompt_weights.h"
#include "models/encoder_settings.h"
#include "nodes/nodes.h"
#include "nodes/values.h"
#include "workflow/execute.h"

namespace hr {
namespace {

// The padding id of this encoder's token rows: EOS (CLIP-L) or 0 (OpenCLIP).
int32_t pad_for(const CLIPValue& clip, const TextEncoder& enc) {
  return encoder_settings(clip.family, enc.kind, clip.layer, enc.config.layers).pad_with_end ? clip.tokenizer->eos() : 0;
}

TokenChunks tokenize_for(const CLIPValue& clip, const TextEncoder& enc, const std::string& text) {
  ChunkOptions co;
  co.pad = pad_for(clip, enc);
  return prompt_tokenize(*clip.tokenizer, text, co);
}

Result<CLIPConditioning> encode_chunks(ExecContext& ctx, const CLIPValue& clip,
                                       const TextEncoder& enc, const TokenChunks& chunks) {
  const EncoderSettings s = encoder_settings(clip.family, enc.kind, clip.layer, enc.config.layers);
  const Tokenizer& tok = *clip.tokenizer;
  for (const auto& row : chunks.ids)
    for (int32_t id : row)
      if (id < 0 || id >= enc.config.vocab)
        return make_error(ErrorCode::INVALID_ARGUMENT,
                          "token id {} is outside the text encoder's {}-entry vocabulary "
                          "(is the tokenizer the one this checkpoint was trained with?)",
                          id, enc.config.vocab);
  CLIPEncodeOptions eo;
  eo.layer = s.layer;
  eo.layer_final_norm = s.final_norm;
  eo.pad = pad_for(clip, enc);
  eo.bos = tok.bos();
  eo.eos = tok.eos();
  enc.weights->bind(ctx.opts.backend, ctx.opts.allocator);
  return clip_text_encode(*ctx.opts.executor, *enc.weights, enc.config, chunks, eo);
}

Result<CLIPConditioning> encode_one(ExecContext& ctx, const CLIPValue& clip, const TextEncoder& enc,
                                    const std::string& text) {
  return encode_chunks(ctx, clip, enc, tokenize_for(clip, enc, text));
}

Result<const CLIPValue*> clip_of(const NodeInputs& in) {
  auto clip = in.get<std::shared_ptr<const CLIPValue>>("clip");
  if (!clip || !*clip)
    return make_error(ErrorCode::INVALID_ARGUMENT,
                      "clip input is invalid: the checkpoint has no text encoder");
  return clip->get();
}

std::vector<std::any> cond_out(CLIPConditioning out, CondEntry e) {
  e.cond = std::make_shared<const HostTensor>(std::move(out.cond));
  e.pooled = std::make_shared<const HostTensor>(std::move(out.pooled));
  Conditioning cond;
  cond.entries.push_back(std::move(e));
  return {std::make_shared<const Conditioning>(std::move(cond))};
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
    auto clip = in.get<std::shared_ptr<const CLIPValue>>("clip");
    if (!clip || !*clip)
      return make_error(ErrorCode::INVALID_ARGUMENT,
                        "clip input is invalid: the checkpoint has no text encoder");
    const CLIPValue& c = **clip;
    std::string text = in.get_string("text");
    CLIPConditioning out;
    if (c.family == ModelFamily::SDXL && c.encoders.size() == 2) {
      HR_ASSIGN_OR_RETURN(CLIPConditioning l, encode_one(ctx, c, c.encoders[0], text));
      HR_ASSIGN_OR_RETURN(CLIPConditioning g, encode_one(ctx, c, c.encoders[1], text));
      HR_ASSIGN_OR_RETURN(out, clip_sdxl_combine(l, g));
    } else {
      HR_ASSIGN_OR_RETURN(out, encode_one(ctx, c, c.encoders[0], text));
    }
    Conditioning cond;
    CondEntry e;
    e.cond = std::make_shared<const HostTensor>(std::move(out.cond));
    e.pooled = std::make_shared<const HostTensor>(std::move(out.pooled));
    cond.entries.push_back(std::move(e));
    return std::vector<std::any>{std::make_shared<const Conditioning>(std::move(cond))};
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
    if (c->encoders.size() != 2)
      return make_error(ErrorCode::INVALID_ARGUMENT, "CLIPTextEncodeSDXL needs an SDXL clip (CLIP-L + bigG)");
    TokenChunks l = tokenize_for(*c, c->encoders[0], in.get_string("text_l"));
    TokenChunks g = tokenize_for(*c, c->encoders[1], in.get_string("text_g"));
    // ComfyUI pads the shorter prompt with empty chunks so both encoders see as many chunks.
    TokenChunks el = tokenize_for(*c, c->encoders[0], ""), eg = tokenize_for(*c, c->encoders[1], "");
    while (l.size() < g.size()) {
      l.ids.push_back(el.ids[0]);
      l.weights.push_back(el.weights[0]);
    }
    while (g.size() < l.size()) {
      g.ids.push_back(eg.ids[0]);
      g.weights.push_back(eg.weights[0]);
    }
    HR_ASSIGN_OR_RETURN(CLIPConditioning cl, encode_chunks(ctx, *c, c->encoders[0], l));
    HR_ASSIGN_OR_RETURN(CLIPConditioning cg, encode_chunks(ctx, *c, c->encoders[1], g));
    HR_ASSIGN_OR_RETURN(CLIPConditioning out, clip_sdxl_combine(cl, cg));
    CondEntry e;
    e.width = in.get_int("width");
    e.height = in.get_int("height");
    e.crop_w = in.get_int("crop_w");
    e.crop_h = in.get_int("crop_h");
    e.target_width = in.get_int("target_width");
    e.target_height = in.get_int("target_height");
    return cond_out(std::move(out), std::move(e));
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
    // The refiner's only text encoder is bigG: the last encoder of the clip.
    const TextEncoder& g = c->encoders.back();
    if (g.kind != TextEncoderKind::OPENCLIP_BIGG)
      return make_error(ErrorCode::INVALID_ARGUMENT, "CLIPTextEncodeSDXLRefiner needs an OpenCLIP bigG clip");
    HR_ASSIGN_OR_RETURN(CLIPConditioning out, encode_one(ctx, *c, g, in.get_string("text")));
    CondEntry e;
    e.width = in.get_int("width");
    e.height = in.get_int("height");
    e.aesthetic_score = in.get_float("ascore");
    return cond_out(std::move(out), std::move(e));
  };
  r.add(rf);
}

}  // namespace hr
