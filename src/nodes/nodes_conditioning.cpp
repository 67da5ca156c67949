// Text conditioning nodes: CLIPTextEncode, CLIPSetLastLayer, ConditioningCombine.
#include "models/prompt_weights.h"
#include "nodes/nodes.h"
#include "nodes/values.h"
#include "workflow/execute.h"

namespace hr {
namespace {

// ComfyUI's per-family text-encoder settings (comfy/sd1_clip.py, sd2_clip.py, sdxl_clip.py).
struct EncoderSettings {
  int layer;
  bool final_norm;
  bool pad_with_end;  // pad with EOS (CLIP-L) or with 0 (OpenCLIP)
};

EncoderSettings encoder_settings(ModelFamily family, TextEncoderKind kind, int layer) {
  switch (family) {
    case ModelFamily::SDXL:
      return {layer ? layer : -2, false, kind == TextEncoderKind::CLIP_L};
    case ModelFamily::SD2:
      return {layer ? layer : -2, true, false};
    default:
      return {layer ? layer : -1, true, true};
  }
}

Result<CLIPConditioning> encode_one(ExecContext& ctx, const CLIPValue& clip, const TextEncoder& enc,
                                    const std::string& text) {
  EncoderSettings s = encoder_settings(clip.family, enc.kind, clip.layer);
  if (-s.layer > enc.config.layers)
    return make_error(ErrorCode::INVALID_ARGUMENT,
                      "clip layer {} does not exist: the text encoder has {} layers", s.layer,
                      enc.config.layers);
  const Tokenizer& tok = *clip.tokenizer;
  ChunkOptions co;
  co.pad = s.pad_with_end ? tok.eos() : 0;
  TokenChunks chunks = prompt_tokenize(tok, text, co);
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
  eo.pad = co.pad;
  eo.bos = tok.bos();
  eo.eos = tok.eos();
  enc.weights->bind(ctx.opts.backend, ctx.opts.allocator);
  return clip_text_encode(*ctx.opts.executor, *enc.weights, enc.config, chunks, eo);
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
}

}  // namespace hr
