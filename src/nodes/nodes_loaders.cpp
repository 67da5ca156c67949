// Loader nodes: CheckpointLoaderSimple, UNETLoader, VAELoader, CLIPLoader.
#include <cstdlib>

#include "nodes/loader_files.h"
#include "nodes/nodes.h"
#include "nodes/values.h"
#include "workflow/execute.h"

namespace hr {
namespace {

LoadOptions load_options(const ExecContext& ctx) {
  LoadOptions o;
  o.diffusion_dtype = ctx.opts.compute_dtype;
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
  clip.inputs = {file_combo("clip_name", env, kCLIPFolder),
                 spec_combo("type", {"stable_diffusion"})};
  clip.outputs = {{IoType::CLIP, "CLIP"}};
  clip.run = [](ExecContext& ctx, const NodeInputs& in) -> Result<std::vector<std::any>> {
    HR_ASSIGN_OR_RETURN(std::string path, model_file(ctx, kCLIPFolder, in.get_string("clip_name")));
    HR_ASSIGN_OR_RETURN(auto file, open_file(ctx, path));
    HR_ASSIGN_OR_RETURN(CheckpointInfo info, checkpoint_inspect(*file));
    HR_ASSIGN_OR_RETURN(std::shared_ptr<const CLIPValue> c, clip_from_file(ctx, file, info));
    return std::vector<std::any>{std::move(c)};
  };
  r.add(clip);
}

}  // namespace hr
