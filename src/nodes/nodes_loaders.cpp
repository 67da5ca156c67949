// Loader nodes: CheckpointLoaderSimple, UNETLoader, VAELoader, CLIPLoader, DualCLIPLoader.
#include <cstdlib>

#include "models/flux/flux_text_encoder.h"
#include "models/model_config.h"
#include "models/text_encoder_file.h"

#include "nodes/loader_files.h"
#include "nodes/nodes.h"
#include "nodes/values.h"
#include "workflow/execute.h"

namespace hr {
namespace {

LoadOptions load_options(const ExecContext& ctx) {
  LoadOptions o;
  o.diffusion_dtype = ctx.opts.compute_dtype;
  o.diffusion_dtype_auto = ctx.opts.dtype_auto && ctx.opts.backend &&
                           ctx.opts.backend->op_supported(OpKind::LINEAR, DType::BF16);
  o.vae_dtype = ctx.opts.compute_dtype;
  o.text_encoder_dtype = ctx.opts.compute_dtype;
  o.diffusion_weight_dtype = ctx.opts.unet_weights;
  o.text_encoder_weight_dtype = ctx.opts.text_encoder_weights;
  o.models_dir = ctx.opts.models_dir;
  return o;
}

Result<std::shared_ptr<const CLIPValue>> clip_from_file(
    const ExecContext& ctx, const std::shared_ptr<const SafetensorsFile>& file,
    const CheckpointInfo& info) {
  HR_ASSIGN_OR_RETURN(std::unique_ptr<TextEncoder> enc,
                      text_encoder_load(file, info, load_options(ctx)));
  CLIPValue clip;
  clip.encoder = std::move(enc);
  return std::make_shared<const CLIPValue>(std::move(clip));
}

// UNETLoader's weight_dtype (Note [fp8 at load] in models/weight_format.cpp). The _fast mode
// multiplies the linear layers in fp8 where the GPU has fp8 tensor cores and dequantizes
// elsewhere, as ComfyUI (Note [fp8 linear] in graph/pass_fp8.cpp).
void weight_dtype_apply(const std::string& choice, LoadOptions& o) {
  if (choice == "fp8_e4m3fn" || choice == "fp8_e4m3fn_fast") o.diffusion_weight_dtype = DType::F8_E4M3;
  if (choice == "fp8_e5m2") o.diffusion_weight_dtype = DType::F8_E5M2;
  o.diffusion_fp8_fast = choice == "fp8_e4m3fn_fast";
}

// ComfyUI's folder names; Note [model folder aliases] makes them search unet/ and clip/ too.
constexpr const char* kCkptFolder = "checkpoints";
constexpr const char* kUNetFolder = "diffusion_models";
constexpr const char* kVAEFolder = "vae";
constexpr const char* kCLIPFolder = "text_encoders";

// DualCLIPLoader's types (nodes.py); only "flux" is supported.
const std::vector<std::string> kDualCLIPTypes = {"sdxl",          "sd3",     "flux",
                                                 "hunyuan_video", "hidream", "hunyuan_image"};

// One file of a DualCLIPLoader pair: what it holds and where.
struct DualCLIPFile {
  std::string input;  // "clip_name1" / "clip_name2"
  std::string name;
  std::shared_ptr<const SafetensorsFile> file;
  std::vector<TextEncoderFound> found;
  const TextEncoderFound* only(const char* kind) const {
    return found.size() == 1 && found[0].kind == kind ? &found[0] : nullptr;
  }
};

// Note [DualCLIPLoader flux]
// ComfyUI (comfy/sd.py load_text_encoder_state_dicts, CLIPType.FLUX) builds FluxClipModel for
// any two files and lets FluxClipModel.load_sd route each by its keys (CLIP-L when it has
// "text_model.encoder.layers.1.mlp.fc1.weight", else T5); a wrong pair loads with missing keys.
// headroom routes the same way, in either order, but refuses a pair that is not one CLIP-L file
// and one T5 file, naming what each file holds.
Result<std::shared_ptr<const CLIPValue>> dual_clip_flux(const ExecContext& ctx,
                                                       const DualCLIPFile& a,
                                                       const DualCLIPFile& b) {
  const DualCLIPFile* clip = a.only("clip_l") ? &a : b.only("clip_l") ? &b : nullptr;
  const DualCLIPFile* t5 = a.only("t5xxl") ? &a : b.only("t5xxl") ? &b : nullptr;
  if (!clip || !t5 || clip == t5)
    return make_error(ErrorCode::INVALID_ARGUMENT,
                      "DualCLIPLoader (type flux) needs one CLIP-L file and one T5-XXL file: "
                      "{} '{}' holds {}; {} '{}' holds {}",
                      a.input, a.name, text_encoder_file_describe(*a.file, a.found), b.input,
                      b.name, text_encoder_file_describe(*b.file, b.found));
  const ModelFamily* family = flux_text_encoder_family();
  if (!family)
    return make_error(ErrorCode::UNSUPPORTED,
                      "DualCLIPLoader (type flux): this build has no Flux model family");
  HR_ASSIGN_OR_RETURN(ModelSettings settings,
                      model_settings_read(clip->file->path(), clip->file->metadata()));
  TextEncoderSource clip_src{clip->file, clip->only("clip_l")->prefix,
                             settings.text_encoder_heads_at(0)};
  TextEncoderSource t5_src{t5->file, t5->only("t5xxl")->prefix, 0};
  HR_ASSIGN_OR_RETURN(std::unique_ptr<TextEncoder> enc,
                      flux_text_encoder_load(*family, clip_src, t5_src, load_options(ctx)));
  CLIPValue value;
  value.encoder = std::move(enc);
  return std::make_shared<const CLIPValue>(std::move(value));
}

}  // namespace

void nodes_register_loaders(NodeRegistry& r, const NodeEnv& env) {
  NodeDef ckpt;
  ckpt.class_type = "CheckpointLoaderSimple";
  ckpt.display_name = "Load Checkpoint";
  ckpt.category = "loaders";
  ckpt.inputs = {file_combo("ckpt_name", env, kCkptFolder)};
  ckpt.outputs = {{IoType::MODEL, "MODEL"}, {IoType::CLIP, "CLIP"}, {IoType::VAE, "VAE"}};
  ckpt.run = [](ExecContext& ctx, const NodeInputs& in) -> Result<std::vector<std::any>> {
    HR_ASSIGN_OR_RETURN(std::string path, model_file(ctx, kCkptFolder, in.get_string("ckpt_name")));
    HR_ASSIGN_OR_RETURN(auto file, open_file(ctx, path));
    HR_ASSIGN_OR_RETURN(std::unique_ptr<LoadedModel> m, model_load(file, load_options(ctx)));
    if (!m->diffusion || !m->vae)
      return make_error(ErrorCode::INVALID_ARGUMENT,
                        "{} is not a full checkpoint (diffusion model {}, VAE {}); use "
                        "UNETLoader/VAELoader",
                        path, m->diffusion ? "found" : "missing", m->vae ? "found" : "missing");
    std::shared_ptr<LoadedModel> model(std::move(m));
    std::vector<std::any> out;
    out.emplace_back(std::make_shared<const ModelValue>(ModelValue{model}));
    if (model->info.text_encoders.empty()) {
      out.emplace_back(std::shared_ptr<const CLIPValue>());
    } else {
      HR_ASSIGN_OR_RETURN(std::shared_ptr<const CLIPValue> clip,
                          clip_from_file(ctx, file, model->info));
      out.emplace_back(std::move(clip));
    }
    out.emplace_back(std::make_shared<const VAEValue>(VAEValue{model}));
    return out;
  };
  r.add(ckpt);

  NodeDef unet;
  unet.class_type = "UNETLoader";
  unet.display_name = "Load Diffusion Model";
  unet.category = "advanced/loaders";
  unet.inputs = {file_combo("unet_name", env, kUNetFolder),
                 spec_combo("weight_dtype", {"default", "fp8_e4m3fn", "fp8_e4m3fn_fast", "fp8_e5m2"})};
  unet.outputs = {{IoType::MODEL, "MODEL"}};
  unet.run = [](ExecContext& ctx, const NodeInputs& in) -> Result<std::vector<std::any>> {
    HR_ASSIGN_OR_RETURN(std::string path, model_file(ctx, kUNetFolder, in.get_string("unet_name")));
    HR_ASSIGN_OR_RETURN(auto file, open_file(ctx, path));
    LoadOptions o = load_options(ctx);
    o.load_vae = false;
    weight_dtype_apply(in.get_string("weight_dtype"), o);
    HR_ASSIGN_OR_RETURN(std::unique_ptr<LoadedModel> m, model_load(file, o));
    if (!m->diffusion)
      return make_error(ErrorCode::INVALID_ARGUMENT, "{} holds no diffusion model (UNet or DiT)",
                        path);
    return std::vector<std::any>{
        std::make_shared<const ModelValue>(ModelValue{std::shared_ptr<LoadedModel>(std::move(m))})};
  };
  r.add(unet);

  NodeDef vae;
  vae.class_type = "VAELoader";
  vae.display_name = "Load VAE";
  vae.category = "loaders";
  vae.inputs = {file_combo("vae_name", env, kVAEFolder)};
  vae.outputs = {{IoType::VAE, "VAE"}};
  vae.run = [](ExecContext& ctx, const NodeInputs& in) -> Result<std::vector<std::any>> {
    HR_ASSIGN_OR_RETURN(std::string path, model_file(ctx, kVAEFolder, in.get_string("vae_name")));
    HR_ASSIGN_OR_RETURN(auto file, open_file(ctx, path));
    LoadOptions o = load_options(ctx);
    o.load_diffusion = false;
    HR_ASSIGN_OR_RETURN(std::unique_ptr<LoadedModel> m, model_load(file, o));
    if (!m->vae) return make_error(ErrorCode::INVALID_ARGUMENT, "{} holds no VAE", path);
    return std::vector<std::any>{
        std::make_shared<const VAEValue>(VAEValue{std::shared_ptr<LoadedModel>(std::move(m))})};
  };
  r.add(vae);

  NodeDef clip;
  clip.class_type = "CLIPLoader";
  clip.display_name = "Load CLIP";
  clip.category = "advanced/loaders";
  // Note [CLIPLoader types]: the file's keys choose the encoder, as ComfyUI's
  // load_text_encoder_state_dicts routes a single file (detect_te_model): a CLIP file is SD's
  // encoder and a Qwen3-4B file Z-Image's (ComfyUI takes it as Z-Image's for every type but
  // flux / flux2); "lumina2" is the type Z-Image's workflows name.
  clip.inputs = {file_combo("clip_name", env, kCLIPFolder),
                 spec_combo("type", {"stable_diffusion", "lumina2"})};
  clip.outputs = {{IoType::CLIP, "CLIP"}};
  clip.run = [](ExecContext& ctx, const NodeInputs& in) -> Result<std::vector<std::any>> {
    HR_ASSIGN_OR_RETURN(std::string path, model_file(ctx, kCLIPFolder, in.get_string("clip_name")));
    HR_ASSIGN_OR_RETURN(auto file, open_file(ctx, path));
    HR_ASSIGN_OR_RETURN(CheckpointInfo info, checkpoint_inspect(*file));
    HR_ASSIGN_OR_RETURN(std::shared_ptr<const CLIPValue> c, clip_from_file(ctx, file, info));
    return std::vector<std::any>{std::move(c)};
  };
  r.add(clip);

  NodeDef dual;
  dual.class_type = "DualCLIPLoader";
  dual.display_name = "DualCLIPLoader";
  dual.category = "advanced/loaders";
  InputSpec device = spec_combo("device", {"default", "cpu"});
  device.required = false;
  dual.inputs = {file_combo("clip_name1", env, kCLIPFolder),
                 file_combo("clip_name2", env, kCLIPFolder), spec_combo("type", kDualCLIPTypes),
                 device};
  dual.outputs = {{IoType::CLIP, "CLIP"}};
  // `device` ("cpu": ComfyUI loads and runs the encoders on the CPU) is accepted and changes
  // nothing: where weights and computation go is the memory planner's decision here.
  dual.run = [](ExecContext& ctx, const NodeInputs& in) -> Result<std::vector<std::any>> {
    const std::string type = in.get_string("type");
    if (type != "flux")
      return make_error(ErrorCode::UNSUPPORTED,
                        "DualCLIPLoader: type '{}' is not supported by headroom (supported: flux)",
                        type);
    DualCLIPFile files[2];
    for (int i = 0; i < 2; ++i) {
      DualCLIPFile& f = files[i];
      f.input = i == 0 ? "clip_name1" : "clip_name2";
      f.name = in.get_string(f.input);
      HR_ASSIGN_OR_RETURN(std::string path, model_file(ctx, kCLIPFolder, f.name));
      HR_ASSIGN_OR_RETURN(f.file, open_file(ctx, path));
      f.found = text_encoder_file_detect(*f.file);
    }
    HR_ASSIGN_OR_RETURN(std::shared_ptr<const CLIPValue> c, dual_clip_flux(ctx, files[0], files[1]));
    return std::vector<std::any>{std::move(c)};
  };
  r.add(dual);
}

}  // namespace hr
