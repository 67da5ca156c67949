// Every registered node plans, and every plan is the run: workflows that together use each
// registered class (SD1 text-to-image, SDXL with CLIPTextEncodeSDXL, img2img with LoadImage +
// VAEEncode at denoise 0.6, VAEDecodeTiled, a two-pass latent upscale, separate loaders, LoRAs,
// Flux.1 from a single file and from separate files, the Z-Image sampling nodes, Z-Image Turbo's
// template) on tiny
// random-weight checkpoints, f32 on the CPU, each planned and then run without a budget and
// under budgets between the smallest that fits and the unbudgeted peak, so that weights stream,
// the VAE tiles and the sampler splits cond and uncond. The predicted allocator-level peak must be
// within 2 % of Allocator::total().peak, and the plan must say it fits exactly when the run ends
// without running out of memory.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>

#include "backend/allocator.h"
#include "backend/backend.h"
#include "core/alignment.h"
#include "graph/executor.h"
#include "memory/eviction.h"
#include "memory/executor_policies.h"
#include "models/family.h"
#include "models/flux/flux_text_encoder.h"
#include "models/make_model.h"
#include "models/safetensors.h"
#include "models/zimage/zimage_make_model.h"
#include "nodes/nodes.h"
#include "core/png_io.h"
#include "test_paths.h"
#include "test_safetensors.h"
#include "workflow/execute.h"
#include "workflow/prompt.h"
#include "workflow/workflow_plan.h"
#include "workflow_json.h"

namespace hr {
namespace {

namespace fs = std::filesystem;

using test::link;
using test::node;

Json sampler(const char* model, const char* pos, const char* neg, const char* latent,
             double denoise) {
  return node("KSampler", {{"seed", 7}, {"steps", 2}, {"cfg", 6.0}, {"sampler_name", "euler"},
                           {"scheduler", "normal"}, {"denoise", denoise}, {"model", link(model)},
                           {"positive", link(pos)}, {"negative", link(neg)},
                           {"latent_image", link(latent)}});
}

// SD1 text-to-image: the README's workflow, small.
Json sd1_text_to_image() {
  return Json{
      {"4", node("CheckpointLoaderSimple", {{"ckpt_name", "tiny-sd1.safetensors"}})},
      {"5", node("EmptyLatentImage", {{"width", 128}, {"height", 128}, {"batch_size", 1}})},
      {"6", node("CLIPTextEncode", {{"text", "a red circle"}, {"clip", link("4", 1)}})},
      {"7", node("CLIPTextEncode", {{"text", ""}, {"clip", link("4", 1)}})},
      {"3", sampler("4", "6", "7", "5", 1.0)},
      {"8", node("VAEDecode", {{"samples", link("3")}, {"vae", link("4", 2)}})},
      {"9", node("SaveImage", {{"filename_prefix", "t2i"}, {"images", link("8")}})}};
}

// Flux's sampling-side nodes on SD1 until a Flux family exists: ModelSamplingFlux patches the
// model sampling (as ComfyUI does, whatever the model), FluxGuidance and FluxDisableGuidance set
// an extra the UNet ignores, and EmptySD3LatentImage's 16-channel zeros become the UNet's 4 (ComfyUI's
// fix_empty_latent_channels).
Json sd1_flux_nodes() {
  return Json{
      {"4", node("CheckpointLoaderSimple", {{"ckpt_name", "tiny-sd1.safetensors"}})},
      {"10", node("ModelSamplingFlux", {{"max_shift", 1.15}, {"base_shift", 0.5}, {"width", 128},
                                        {"height", 128}, {"model", link("4")}})},
      {"5", node("EmptySD3LatentImage", {{"width", 128}, {"height", 128}, {"batch_size", 1}})},
      {"6", node("CLIPTextEncode", {{"text", "a red circle"}, {"clip", link("4", 1)}})},
      {"7", node("CLIPTextEncode", {{"text", ""}, {"clip", link("4", 1)}})},
      {"11", node("FluxGuidance", {{"guidance", 3.5}, {"conditioning", link("6")}})},
      {"12", node("FluxDisableGuidance", {{"conditioning", link("7")}})},
      {"3", sampler("10", "11", "12", "5", 1.0)},
      {"8", node("VAEDecode", {{"samples", link("3")}, {"vae", link("4", 2)}})},
      {"9", node("SaveImage", {{"filename_prefix", "flux_nodes"}, {"images", link("8")}})}};
}

// SDXL with its own encoders and the advanced sampler.
Json sdxl_encoders() {
  Json size = {{"width", 1024}, {"height", 1024}, {"crop_w", 0}, {"crop_h", 0},
               {"target_width", 1024}, {"target_height", 1024}};
  auto size_prompt = [&](const char* text) {
    Json j = size;
    j.update({{"text_g", text}, {"text_l", text}, {"clip", link("4", 1)}});
    return j;
  };
  Json pos = size, neg = size;
  pos.update({{"text_g", "a lighthouse"}, {"text_l", "a lighthouse, dusk"}, {"clip", link("4", 1)}});
  neg.update({{"text_g", ""}, {"text_l", ""}, {"clip", link("4", 1)}});
  return Json{
      {"4", node("CheckpointLoaderSimple", {{"ckpt_name", "tiny-sdxl.safetensors"}})},
      {"5", node("EmptyLatentImage", {{"width", 128}, {"height", 128}, {"batch_size", 1}})},
      {"6", node("CLIPTextEncodeSDXL", pos)},
      {"7", node("CLIPTextEncodeSDXL", neg)},
      {"10", node("CLIPTextEncodeSDXL", size_prompt("sharp"))},
      {"11", node("ConditioningCombine", {{"conditioning_1", link("6")},
                                          {"conditioning_2", link("10")}})},
      {"3", node("KSamplerAdvanced",
                 {{"add_noise", "enable"}, {"noise_seed", 3}, {"steps", 3}, {"cfg", 5.0},
                  {"sampler_name", "euler"}, {"scheduler", "karras"}, {"start_at_step", 0},
                  {"end_at_step", 2}, {"return_with_leftover_noise", "disable"},
                  {"model", link("4")}, {"positive", link("11")}, {"negative", link("7")},
                  {"latent_image", link("5")}})},
      {"8", node("VAEDecode", {{"samples", link("3")}, {"vae", link("4", 2)}})},
      {"9", node("SaveImage", {{"filename_prefix", "xl"}, {"images", link("8")}})}};
}

// The SDXL refiner on its own: its only encoder is bigG, its conditioning carries an aesthetic
// score.
Json sdxl_refiner() {
  auto encode = [](const char* text, double ascore) {
    return node("CLIPTextEncodeSDXLRefiner", {{"ascore", ascore}, {"width", 1024}, {"height", 1024},
                                              {"text", text}, {"clip", link("4", 1)}});
  };
  return Json{
      {"4", node("CheckpointLoaderSimple", {{"ckpt_name", "tiny-sdxl-refiner.safetensors"}})},
      {"5", node("EmptyLatentImage", {{"width", 96}, {"height", 96}, {"batch_size", 1}})},
      {"6", encode("a lighthouse", 6.0)},
      {"7", encode("", 2.5)},
      {"3", sampler("4", "6", "7", "5", 0.3)},
      {"8", node("VAEDecode", {{"samples", link("3")}, {"vae", link("4", 2)}})},
      {"9", node("SaveImage", {{"filename_prefix", "refined"}, {"images", link("8")}})}};
}

// img2img: a picture from the input folder, scaled, encoded, sampled at denoise 0.6, decoded
// in tiles and previewed.
Json image_to_image() {
  return Json{
      {"4", node("CheckpointLoaderSimple", {{"ckpt_name", "tiny-sd1.safetensors"}})},
      {"1", node("LoadImage", {{"image", "picture.png"}})},
      {"2", node("ImageScale", {{"image", link("1")}, {"upscale_method", "bilinear"},
                                {"width", 160}, {"height", 128}, {"crop", "disabled"}})},
      {"5", node("VAEEncode", {{"pixels", link("2")}, {"vae", link("4", 2)}})},
      {"6", node("CLIPTextEncode", {{"text", "a painting"}, {"clip", link("4", 1)}})},
      {"7", node("CLIPTextEncode", {{"text", "blurry"}, {"clip", link("4", 1)}})},
      {"3", sampler("4", "6", "7", "5", 0.6)},
      {"8", node("VAEDecodeTiled", {{"samples", link("3")}, {"vae", link("4", 2)},
                                    {"tile_size", 64}, {"overlap", 32}, {"temporal_size", 64},
                                    {"temporal_overlap", 8}})},
      {"9", node("PreviewImage", {{"images", link("8")}})}};
}

// Two passes with a latent upscale between them, from separate loaders.
Json two_pass_upscale() {
  return Json{
      {"20", node("UNETLoader", {{"unet_name", "tiny-sd1.safetensors"}, {"weight_dtype", "default"}})},
      {"21", node("CLIPLoader", {{"clip_name", "tiny-sd1.safetensors"}, {"type", "stable_diffusion"}})},
      {"22", node("VAELoader", {{"vae_name", "tiny-sd1.safetensors"}})},
      {"23", node("CLIPSetLastLayer", {{"clip", link("21")}, {"stop_at_clip_layer", -2}})},
      {"5", node("EmptyLatentImage", {{"width", 64}, {"height", 64}, {"batch_size", 2}})},
      {"6", node("CLIPTextEncode", {{"text", "hills"}, {"clip", link("23")}})},
      {"7", node("CLIPTextEncode", {{"text", ""}, {"clip", link("23")}})},
      {"3", sampler("20", "6", "7", "5", 1.0)},
      {"10", node("LatentUpscale", {{"samples", link("3")}, {"upscale_method", "nearest-exact"},
                                    {"width", 96}, {"height", 0}, {"crop", "disabled"}})},
      {"11", node("LatentUpscaleBy", {{"samples", link("10")}, {"upscale_method", "bilinear"},
                                      {"scale_by", 1.5}})},
      {"12", sampler("20", "6", "7", "11", 0.5)},
      {"8", node("VAEDecode", {{"samples", link("12")}, {"vae", link("22")}})},
      {"9", node("SaveImage", {{"filename_prefix", "two_pass/x"}, {"images", link("8")}})}};
}

// The latent nodes (nodes_latent.cpp) between two passes: batch picked, repeated and joined,
// composited, blended, cropped, flipped, rotated and combined; host-only work the plan must
// carry through to the second sampler and the decode.
Json latent_nodes_between_passes() {
  Json wf = two_pass_upscale();
  for (const char* id : {"10", "11"}) wf.erase(id);
  auto l = [](const char* id) { return link(id); };
  wf["30"] = node("LatentFromBatch", {{"samples", l("3")}, {"batch_index", 1}, {"length", 1}});
  wf["31"] = node("RepeatLatentBatch", {{"samples", l("30")}, {"amount", 2}});
  wf["32"] = node("LatentBatch", {{"samples1", l("3")}, {"samples2", l("31")}});
  wf["33"] = node("LatentComposite", {{"samples_to", l("32")}, {"samples_from", l("30")},
                                      {"x", 16}, {"y", 16}, {"feather", 8}});
  wf["34"] = node("LatentCompositeMasked", {{"destination", l("33")}, {"source", l("31")},
                                            {"x", 8}, {"y", 0}, {"resize_source", false}});
  wf["35"] = node("LatentBlend", {{"samples1", l("34")}, {"samples2", l("32")}, {"blend_factor", 0.5}});
  wf["36"] = node("LatentCrop", {{"samples", l("35")}, {"width", 64}, {"height", 64}, {"x", 0}, {"y", 0}});
  wf["37"] = node("LatentFlip", {{"samples", l("36")}, {"flip_method", "y-axis: horizontally"}});
  wf["38"] = node("LatentRotate", {{"samples", l("37")}, {"rotation", "90 degrees"}});
  wf["39"] = node("LatentAdd", {{"samples1", l("38")}, {"samples2", l("3")}});
  wf["40"] = node("LatentSubtract", {{"samples1", l("39")}, {"samples2", l("30")}});
  wf["41"] = node("LatentMultiply", {{"samples", l("40")}, {"multiplier", 0.5}});
  wf["12"]["inputs"]["latent_image"] = l("41");
  wf["9"]["inputs"]["filename_prefix"] = "latent_nodes/x";
  return wf;
}

// The two passes with the UNet stored in fp8 at load (Note [fp8 at load]): the plan counts fp8
// weights and the dequantized copies in the arena.
Json two_pass_fp8() {
  Json wf = two_pass_upscale();
  wf["20"]["inputs"]["weight_dtype"] = "fp8_e4m3fn";
  return wf;
}

// A LoRA on a UNet stored in fp8 at load (Note [fp8 patches]): patched on the host, resident or
// streamed from the patched host copy.
Json sd1_fp8_lora() {
  return Json{
      {"4", node("CheckpointLoaderSimple", {{"ckpt_name", "golden-tiny-sd1.safetensors"}})},
      {"20", node("UNETLoader", {{"unet_name", "golden-tiny-sd1.safetensors"},
                                 {"weight_dtype", "fp8_e4m3fn"}})},
      {"11", node("LoraLoaderModelOnly", {{"model", link("20")},
                                          {"lora_name", "sd1_stack_a.safetensors"},
                                          {"strength_model", 0.8}})},
      {"5", node("EmptyLatentImage", {{"width", 128}, {"height", 128}, {"batch_size", 1}})},
      {"6", node("CLIPTextEncode", {{"text", "a red circle"}, {"clip", link("4", 1)}})},
      {"7", node("CLIPTextEncode", {{"text", ""}, {"clip", link("4", 1)}})},
      {"3", sampler("11", "6", "7", "5", 1.0)},
      {"8", node("VAEDecode", {{"samples", link("3")}, {"vae", link("4", 2)}})},
      {"9", node("SaveImage", {{"filename_prefix", "fp8_lora"}, {"images", link("8")}})}};
}

// Two LoRAs on tests/data's tiny SD1 checkpoint (whose weights the LoRA files of tests/data/lora
// fit): a LoraLoader, then a LoraLoaderModelOnly, so that the sampler's weights are patched views
// when they stream and the text encoders' when they are resident.
Json sd1_loras() {
  return Json{
      {"4", node("CheckpointLoaderSimple", {{"ckpt_name", "golden-tiny-sd1.safetensors"}})},
      {"10", node("LoraLoader", {{"model", link("4")}, {"clip", link("4", 1)},
                                 {"lora_name", "sd1_stack_a.safetensors"},
                                 {"strength_model", 0.8}, {"strength_clip", 0.6}})},
      {"11", node("LoraLoaderModelOnly", {{"model", link("10")},
                                          {"lora_name", "sd1_stack_b.safetensors"},
                                          {"strength_model", -0.5}})},
      {"5", node("EmptyLatentImage", {{"width", 128}, {"height", 128}, {"batch_size", 1}})},
      {"6", node("CLIPTextEncode", {{"text", "a red circle"}, {"clip", link("10", 1)}})},
      {"7", node("CLIPTextEncode", {{"text", ""}, {"clip", link("10", 1)}})},
      {"3", sampler("11", "6", "7", "5", 1.0)},
      {"8", node("VAEDecode", {{"samples", link("3")}, {"vae", link("4", 2)}})},
      {"9", node("SaveImage", {{"filename_prefix", "lora"}, {"images", link("8")}})}};
}

// Note [split case]: the sampler splits cond and uncond when the batched call cannot run even
// with every weight streamed but one entry's can. On the tiny model the floor of every workflow
// is the VAE's smallest tile (64 px, ~11.5 MiB in f32), so the sampler must work on a latent
// large enough for its batched call to need more (384 px: batch 2 needs ~13.2 MiB, batch 1
// ~10.7 MiB), and the image is decoded small to keep the case fast.
Json cfg_split() {
  Json wf = sd1_text_to_image();
  wf["5"]["inputs"]["width"] = 384;
  wf["5"]["inputs"]["height"] = 384;
  wf["3"]["inputs"]["steps"] = 1;
  wf["10"] = node("LatentUpscaleBy", {{"samples", link("3")}, {"upscale_method", "bilinear"},
                                      {"scale_by", 0.25}});
  wf["8"]["inputs"]["samples"] = link("10");
  return wf;
}

// Flux's text encoders (DualCLIPLoader, CLIPTextEncodeFlux) on SD1 until a Flux family
// exists: the tiny T5's context is 32 wide, as the golden tiny-sd1 UNet's cross-attention, which
// reads its 256 tokens and ignores CLIP-L's pooled output.
Json flux_text_encoders_on_sd1() {
  return Json{
      {"4", node("CheckpointLoaderSimple", {{"ckpt_name", "golden-tiny-sd1.safetensors"}})},
      {"20", node("DualCLIPLoader", {{"clip_name1", "t5xxl_tiny.safetensors"},
                                     {"clip_name2", "clip_l_tiny.safetensors"},
                                     {"type", "flux"}})},
      {"5", node("EmptyLatentImage", {{"width", 64}, {"height", 64}, {"batch_size", 1}})},
      {"6", node("CLIPTextEncodeFlux", {{"clip", link("20")}, {"clip_l", "a red circle"},
                                        {"t5xxl", "a cat"}, {"guidance", 3.5}})},
      {"7", node("CLIPTextEncode", {{"text", ""}, {"clip", link("20")}})},
      {"3", sampler("4", "6", "7", "5", 1.0)},
      {"8", node("VAEDecode", {{"samples", link("3")}, {"vae", link("4", 2)}})},
      {"9", node("SaveImage", {{"filename_prefix", "flux_te"}, {"images", link("8")}})}};
}

// The real Flux family: ComfyUI's end-to-end workflow (tests/data/flux/e2e) on the tiny
// single-file checkpoint (CheckpointLoaderSimple, CLIPTextEncode x2, FluxGuidance,
// EmptySD3LatentImage, ModelSamplingFlux, KSampler at cfg 1, VAEDecode), so that both text
// encoders run and give their memory back before the DiT, the DiT runs resident or streamed and
// the 16-channel VAE decodes or tiles.
Json flux_single_file() {
  return Json{
      {"1", node("CheckpointLoaderSimple", {{"ckpt_name", "tiny-flux.safetensors"}})},
      {"2", node("CLIPTextEncode", {{"text", "a photo of a (red:1.2) fox in the snow"},
                                    {"clip", link("1", 1)}})},
      {"3", node("CLIPTextEncode", {{"text", ""}, {"clip", link("1", 1)}})},
      {"4", node("FluxGuidance", {{"guidance", 3.5}, {"conditioning", link("2")}})},
      {"5", node("EmptySD3LatentImage", {{"width", 64}, {"height", 64}, {"batch_size", 1}})},
      {"6", node("ModelSamplingFlux", {{"max_shift", 1.15}, {"base_shift", 0.5}, {"width", 64},
                                       {"height", 64}, {"model", link("1")}})},
      {"7", node("KSampler", {{"seed", 42}, {"steps", 4}, {"cfg", 1.0}, {"sampler_name", "euler"},
                              {"scheduler", "simple"}, {"denoise", 1.0}, {"model", link("6")},
                              {"positive", link("4")}, {"negative", link("3")},
                              {"latent_image", link("5")}})},
      {"8", node("VAEDecode", {{"samples", link("7")}, {"vae", link("1", 2)}})},
      {"9", node("SaveImage", {{"filename_prefix", "flux"}, {"images", link("8")}})}};
}

// The Z-Image template's sampling-side nodes on the tiny Flux checkpoint until a Z-Image family
// exists: ModelSamplingSD3 then ModelSamplingAuraFlow (the last patch wins, as in ComfyUI),
// ConditioningZeroOut as the negative, res_multistep at cfg 2 so that the zeroed negative runs.
Json zimage_sampling_nodes_on_flux() {
  Json wf = flux_single_file();
  wf["6"] = node("ModelSamplingSD3", {{"shift", 3.0}, {"model", link("1")}});
  wf["10"] = node("ModelSamplingAuraFlow", {{"shift", 3.0}, {"model", link("6")}});
  wf["3"] = node("ConditioningZeroOut", {{"conditioning", link("2")}});
  wf["7"]["inputs"]["model"] = link("10");
  wf["7"]["inputs"]["sampler_name"] = "res_multistep";
  wf["7"]["inputs"]["cfg"] = 2.0;
  return wf;
}

// The same tensors as ComfyUI's separate Flux files: the DiT from UNETLoader, T5-XXL and CLIP-L
// from DualCLIPLoader, the autoencoder from VAELoader; cfg 2, so that the positive and negative
// share the DiT's calls, at a larger latent.
Json flux_separate_files() {
  return Json{
      {"20", node("UNETLoader", {{"unet_name", "tiny-flux-dit.safetensors"},
                                 {"weight_dtype", "default"}})},
      {"21", node("DualCLIPLoader", {{"clip_name1", "tiny-flux-clip-l.safetensors"},
                                     {"clip_name2", "tiny-flux-t5xxl.safetensors"},
                                     {"type", "flux"}})},
      {"22", node("VAELoader", {{"vae_name", "tiny-flux-ae.safetensors"}})},
      {"6", node("CLIPTextEncodeFlux", {{"clip", link("21")}, {"clip_l", "a fox"},
                                        {"t5xxl", "a red fox in the snow"}, {"guidance", 3.5}})},
      {"7", node("CLIPTextEncode", {{"text", "blurry"}, {"clip", link("21")}})},
      {"5", node("EmptySD3LatentImage", {{"width", 96}, {"height", 80}, {"batch_size", 1}})},
      {"3", node("KSampler", {{"seed", 3}, {"steps", 2}, {"cfg", 2.0}, {"sampler_name", "euler"},
                              {"scheduler", "simple"}, {"denoise", 1.0}, {"model", link("20")},
                              {"positive", link("6")}, {"negative", link("7")},
                              {"latent_image", link("5")}})},
      {"8", node("VAEDecode", {{"samples", link("3")}, {"vae", link("22")}})},
      {"9", node("SaveImage", {{"filename_prefix", "flux_parts"}, {"images", link("8")}})}};
}

// ComfyUI's Z-Image Turbo template (Comfy-Org workflow_templates image_z_image_turbo: UNETLoader,
// CLIPLoader type lumina2, VAELoader, CLIPTextEncode, ConditioningZeroOut as the negative,
// EmptySD3LatentImage, ModelSamplingAuraFlow shift 3, KSampler res_multistep / simple, cfg 1,
// 8 steps, VAEDecode, SaveImage) on make-model's tiny Z-Image files.
Json zimage_template() {
  return Json{
      {"16", node("UNETLoader", {{"unet_name", "z_image_turbo_bf16.safetensors"},
                                 {"weight_dtype", "default"}})},
      {"18", node("CLIPLoader", {{"clip_name", "qwen_3_4b.safetensors"}, {"type", "lumina2"}})},
      {"17", node("VAELoader", {{"vae_name", "ae.safetensors"}})},
      {"6", node("CLIPTextEncode", {{"text", "a red fox in the snow"}, {"clip", link("18")}})},
      {"7", node("ConditioningZeroOut", {{"conditioning", link("6")}})},
      {"13", node("EmptySD3LatentImage", {{"width", 64}, {"height", 64}, {"batch_size", 1}})},
      {"11", node("ModelSamplingAuraFlow", {{"shift", 3.0}, {"model", link("16")}})},
      {"3", node("KSampler", {{"seed", 7}, {"steps", 8}, {"cfg", 1.0},
                              {"sampler_name", "res_multistep"}, {"scheduler", "simple"},
                              {"denoise", 1.0}, {"model", link("11")}, {"positive", link("6")},
                              {"negative", link("7")}, {"latent_image", link("13")}})},
      {"8", node("VAEDecode", {{"samples", link("3")}, {"vae", link("17")}})},
      {"9", node("SaveImage", {{"filename_prefix", "zimage"}, {"images", link("8")}})}};
}

// The tiny Flux checkpoint with the settings its tensors cannot show (Note [flux rope axes]), and
// its parts as ComfyUI's separate files, each with the settings it needs.
void flux_files_write(const fs::path& models) {
  const std::string ckpt = test::data_path("flux/e2e/tiny-flux.safetensors");
  const std::map<std::string, std::string> axes = {{"headroom.flux.axes_dim", "2,2,4"}};
  const std::map<std::string, std::string> clip = {{"headroom.clip.heads", "2"}};
  std::map<std::string, std::string> both = axes;
  both.insert(clip.begin(), clip.end());
  const struct {
    const char* prefix;
    fs::path out;
    std::map<std::string, std::string> meta;
  } parts[] = {
      {"", models / "checkpoints/tiny-flux.safetensors", both},
      {"model.diffusion_model.", models / "diffusion_models/tiny-flux-dit.safetensors", axes},
      {"text_encoders.clip_l.transformer.", models / "text_encoders/tiny-flux-clip-l.safetensors",
       clip},
      {"text_encoders.t5xxl.transformer.", models / "text_encoders/tiny-flux-t5xxl.safetensors", {}},
      {"vae.", models / "vae/tiny-flux-ae.safetensors", {}}};
  for (const auto& p : parts) {
    Status st = test::safetensors_write_part(ckpt, p.prefix, p.out.string(), p.meta);
    ASSERT_TRUE(st.ok()) << p.out << ": " << st.str();
  }
}

class PlanCoverageTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / fmt::format("hr_plan_coverage_{}", ::getpid());
    fs::remove_all(dir_);
    for (const char* f : {"checkpoints", "diffusion_models", "vae", "text_encoders"})
      fs::create_directories(dir_ / "models" / f);
    fs::create_directories(dir_ / "input");
    for (const char* arch : {"sd1", "sdxl", "sdxl-refiner"}) {
      MakeModelSpec spec;
      spec.arch = arch;
      spec.size = ModelSize::TINY;
      spec.dtype = DType::F32;
      const fs::path ckpt = dir_ / "models/checkpoints" / fmt::format("tiny-{}.safetensors", arch);
      auto w = make_model_write(spec, ckpt.string());
      ASSERT_TRUE(w.ok()) << w.status().str();
    }
    for (const char* f : {"diffusion_models", "vae", "text_encoders"})
      fs::create_symlink(dir_ / "models/checkpoints/tiny-sd1.safetensors",
                         dir_ / "models" / f / "tiny-sd1.safetensors");
    fs::create_symlink(test::golden_path("tiny-sd1.safetensors"),
                       dir_ / "models/checkpoints/golden-tiny-sd1.safetensors");
    fs::create_symlink(test::golden_path("tiny-sd1.yaml"),
                       dir_ / "models/checkpoints/golden-tiny-sd1.yaml");
    for (const char* ext : {".safetensors", ".yaml"})
      fs::create_symlink(test::golden_path(std::string("tiny-sd1") + ext),
                         dir_ / "models/diffusion_models" / (std::string("golden-tiny-sd1") + ext));
    fs::create_directories(dir_ / "models/loras");
    for (const char* f : {"sd1_stack_a.safetensors", "sd1_stack_b.safetensors"})
      fs::create_symlink(test::data_path(std::string("lora/") + f), dir_ / "models/loras" / f);
    Status st = test::safetensors_write_part(test::golden_path("tiny-sd1.safetensors"), "cond_stage_model.transformer.", (dir_ / "models/text_encoders/clip_l_tiny.safetensors").string(), {{"headroom.clip.heads", "4"}});
    ASSERT_TRUE(st.ok()) << st.str();
    st = test::safetensors_write_part(test::data_path("t5/tiny_t5_encoder.safetensors"), "text_encoders.t5xxl.transformer.", (dir_ / "models/text_encoders/t5xxl_tiny.safetensors").string(), {});
    ASSERT_TRUE(st.ok()) << st.str();
    flux_files_write(dir_ / "models");
    MakeModelSpec zimage;
    zimage.arch = "zimage";
    zimage.size = ModelSize::TINY;
    auto made = zimage_make_model_write(zimage, (dir_ / "models").string());
    ASSERT_TRUE(made.ok()) << made.status().str();
    Image8 img;
    img.width = 96;
    img.height = 80;
    img.channels = 3;
    img.pixels.resize(size_t(img.width * img.height * 3));
    for (size_t i = 0; i < img.pixels.size(); ++i) img.pixels[i] = uint8_t(i * 37 % 251);
    ASSERT_TRUE(png_write((dir_ / "input/picture.png").string(), img).ok());
  }
  static void TearDownTestSuite() {
    fs::remove_all(dir_);
  }

  void SetUp() override {
    backend_ = cpu_backend_create(1);
    nodes_register(registry_, NodeEnv{(dir_ / "models").string(), (dir_ / "input").string()});
  }

  Prompt validated(const Json& wf) {
    PromptValidation v = prompt_validate(wf, registry_);
    EXPECT_TRUE(v.ok) << v.summary();
    return v.prompt;
  }

  Result<WorkflowPlan> plan(const Prompt& p, uint64_t budget, bool smallest = false) {
    WorkflowPlanOptions o;
    o.find_smallest_budget = smallest;
    o.backend = backend_.get();
    o.budget = budget;
    o.models_dir = (dir_ / "models").string();
    o.input_dir = (dir_ / "input").string();
    return workflow_plan(p, o);
  }

  struct RunResult {
    bool ok = false;
    ErrorCode code = ErrorCode::OK;
    std::string error;
    uint64_t peak = 0;
  };
  RunResult run(const Prompt& p, uint64_t budget) {
    Allocator alloc(*backend_, budget, eviction_policy());
    Executor ex(*backend_, alloc, executor_policies_default(*backend_));
    ExecOptions o;
    o.models_dir = (dir_ / "models").string();
    o.input_dir = (dir_ / "input").string();
    o.output_dir = (dir_ / "output").string();
    o.temp_dir = (dir_ / "temp").string();
    o.backend = backend_.get();
    o.allocator = &alloc;
    o.executor = &ex;
    PromptExecutor pe;
    Result<ExecResult> r = pe.execute(p, o);
    RunResult rr;
    rr.ok = r.ok();
    if (!r.ok()) {
      rr.code = r.status().code();
      rr.error = r.status().str();
    }
    rr.peak = alloc.total().peak;
    return rr;
  }

  // Plans and runs `wf` under `budget`; the decisions its nodes took go to `decisions`.
  void expect_plan_is_run(const std::string& name, const Json& wf, uint64_t budget,
                          std::vector<std::string>& decisions) {
    Prompt p = validated(wf);
    Result<WorkflowPlan> pl = plan(p, budget);
    ASSERT_TRUE(pl.ok()) << name << ": " << pl.status().str();
    RunResult r = run(p, budget);
    std::printf("  %s, budget %llu: predicted %llu, real %llu, fits %d, ran %d\n", name.c_str(),
                (unsigned long long)budget, (unsigned long long)pl->peak,
                (unsigned long long)r.peak, int(pl->fits), int(r.ok));
    ASSERT_TRUE(r.ok || r.code == ErrorCode::OUT_OF_MEMORY) << name << ": " << r.error;
    EXPECT_EQ(pl->fits, r.ok) << name << ": " << (r.ok ? pl->why_not : r.error);
    EXPECT_LE(std::fabs(double(pl->peak) - double(r.peak)), 0.02 * double(r.peak)) << name;
    for (const NodePlan& n : pl->nodes) {
      decisions.push_back(n.decision);
      if (!n.residency.empty()) decisions.push_back("streams: " + n.residency);
    }
  }

  // Unbudgeted, then at the smallest budget that fits, just below it, and halfway between it and
  // the unbudgeted peak; `all` false: at the smallest budget only.
  void expect_plans_are_runs(const std::string& name, const Json& wf, bool all,
                             std::vector<std::string>& decisions) {
    Prompt p = validated(wf);
    Result<WorkflowPlan> free_plan = plan(p, UINT64_MAX, true);
    ASSERT_TRUE(free_plan.ok()) << name << ": " << free_plan.status().str();
    const uint64_t lo = free_plan->smallest_budget, hi = free_plan->peak;
    ASSERT_GT(lo, 0u) << name;
    if (!all) return expect_plan_is_run(name, wf, lo, decisions);
    expect_plan_is_run(name, wf, UINT64_MAX, decisions);
    for (uint64_t b : {lo - kDeviceAlignment, lo, lo + (hi - lo) / 2})
      expect_plan_is_run(name, wf, b, decisions);
  }

  static fs::path dir_;
  std::unique_ptr<Backend> backend_;
  NodeRegistry registry_;
};
fs::path PlanCoverageTest::dir_;

struct Case {
  std::string name;
  Json workflow;
  bool all_budgets = true;
};

const std::vector<Case>& cases() {
  static const std::vector<Case> c = {{"sd1 text-to-image", sd1_text_to_image()},
                                      {"sdxl encoders", sdxl_encoders()},
                                      {"sdxl refiner", sdxl_refiner()},
                                      {"img2img", image_to_image()},
                                      {"two-pass upscale", two_pass_upscale()},
                                      {"two-pass, fp8 UNet", two_pass_fp8()},
                                      {"latent nodes", latent_nodes_between_passes(), false},
                                      {"sd1 with two LoRAs", sd1_loras()},
                                      {"sd1, fp8 UNet with a LoRA", sd1_fp8_lora()},
                                      {"cond/uncond split", cfg_split(), false},
                                      {"flux sampling nodes on sd1", sd1_flux_nodes(), false},
                                      {"flux text encoders on sd1", flux_text_encoders_on_sd1(),
                                       false},
                                      {"flux single file", flux_single_file()},
                                      {"flux separate files", flux_separate_files()},
                                      {"z-image sampling nodes on flux",
                                       zimage_sampling_nodes_on_flux(), false},
                                      {"z-image turbo template", zimage_template()}};
  return c;
}

// A node added to the registry must come with a workflow here that plans and runs it.
TEST_F(PlanCoverageTest, EveryRegisteredNodeHasAPlanCase) {
  std::set<std::string> covered;
  for (const Case& c : cases())
    for (const auto& [id, n] : c.workflow.items()) covered.insert(n["class_type"].get<std::string>());
  for (const std::string& c : registry_.class_types())
    EXPECT_TRUE(covered.count(c)) << "node class " << c << " has no workflow in plan_coverage_test";
}

TEST_F(PlanCoverageTest, PlansAreRunsUnderEveryBudget) {
  std::vector<std::string> decisions;
  for (const Case& c : cases()) expect_plans_are_runs(c.name, c.workflow, c.all_budgets, decisions);
  auto seen = [&](const char* what) {
    for (const std::string& d : decisions)
      if (d.find(what) != std::string::npos) return true;
    return false;
  };
  // The budgets forced every remedy somewhere: streaming, VAE tiling, the cond/uncond split.
  EXPECT_TRUE(seen("streams: ")) << "no case streamed weights";
  EXPECT_TRUE(seen("tiled")) << "no case tiled the VAE";
  EXPECT_TRUE(seen("one after the other")) << "no case split cond and uncond";
}

// Note [flux plan budgets]: on the tiny Flux checkpoint the smallest budget that fits is set by
// T5's 256 tokens or the VAE's smallest tile, both above what the tiny DiT's step needs, so the
// budgets of PlansAreRunsUnderEveryBudget never make the DiT stream. Here the sampler works on a
// 64 x 64 latent (cond and uncond batched: the largest graph of the workflow; the image is decoded
// from an eighth of it) and the budget is the largest, in 16 KiB steps below the step's arena
// plus its weights, at which the plan streams part of the DiT, after the text encoders have run
// and given their memory back. The plan must be the run.
TEST_F(PlanCoverageTest, FluxDiTStreamsWithinItsStep) {
  Json wf = flux_separate_files();
  wf["5"]["inputs"]["width"] = 512;
  wf["5"]["inputs"]["height"] = 512;
  wf["10"] = node("LatentUpscaleBy", {{"samples", link("3")}, {"upscale_method", "bilinear"},
                                      {"scale_by", 0.125}});
  wf["8"]["inputs"]["samples"] = link("10");
  const Prompt p = validated(wf);
  auto sampler_of = [](const WorkflowPlan& pl) -> const NodePlan* {
    for (const NodePlan& n : pl.nodes)
      if (n.class_type == "KSampler") return &n;
    return nullptr;
  };
  Result<WorkflowPlan> free_plan = plan(p, UINT64_MAX);
  ASSERT_TRUE(free_plan.ok()) << free_plan.status().str();
  const NodePlan* step = sampler_of(*free_plan);
  ASSERT_NE(step, nullptr);
  ASSERT_GT(step->weight_bytes, 0u);
  uint64_t budget = 0;
  for (uint64_t b = align_up(step->arena_bytes + step->weight_bytes); b > step->arena_bytes;
       b -= 16 << 10) {
    Result<WorkflowPlan> pl = plan(p, b);
    ASSERT_TRUE(pl.ok()) << pl.status().str();
    if (!pl->fits) break;
    if (!sampler_of(*pl)->residency.empty()) {
      budget = b;
      break;
    }
  }
  ASSERT_GT(budget, 0u) << "no budget below the step's arena + weights streams the DiT";
  std::vector<std::string> decisions;
  expect_plan_is_run("flux, DiT streamed", wf, budget, decisions);
  bool streamed = false;
  for (const std::string& d : decisions)
    if (d.rfind("streams: ", 0) == 0) {
      std::printf("  %s\n", d.c_str());
      streamed = true;
    }
  EXPECT_TRUE(streamed);
}

// The Z-Image template end to end (no ComfyUI golden exists for the whole workflow yet): it runs,
// the image is not flat, and a second run writes the same PNG bytes.
TEST_F(PlanCoverageTest, ZImageTemplateIsDeterministic) {
  const Prompt p = validated(zimage_template());
  std::vector<std::string> pngs;
  for (int i = 0; i < 2; ++i) {
    fs::remove_all(dir_ / "output");
    RunResult r = run(p, UINT64_MAX);
    ASSERT_TRUE(r.ok) << r.error;
    const fs::path png = dir_ / "output/zimage_00001_.png";
    ASSERT_TRUE(fs::exists(png)) << png;
    Result<Image8> img = png_read(png.string());
    ASSERT_TRUE(img.ok()) << img.status().str();
    EXPECT_EQ(img->width, 64);
    EXPECT_EQ(img->height, 64);
    std::set<uint8_t> values(img->pixels.begin(), img->pixels.end());
    EXPECT_GT(values.size(), 16u) << "a flat image";
    std::ifstream f(png, std::ios::binary);
    pngs.emplace_back(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  }
  EXPECT_EQ(pngs[0], pngs[1]);
}

}  // namespace
}  // namespace hr
