// Image and latent nodes: VAEDecode, VAEDecodeTiled, VAEEncode, SaveImage, PreviewImage,
// LoadImage, LatentUpscale, LatentUpscaleBy, ImageScale.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <random>

#include "core/path_confine.h"
#include "models/autoencoder.h"
#include "nodes/nodes.h"
#include "core/png_io.h"
#include "nodes/resample.h"
#include "nodes/values.h"
#include "workflow/execute.h"

namespace hr {
namespace {

std::shared_ptr<const HostTensor> share(HostTensor t) {
  return std::make_shared<const HostTensor>(std::move(t));
}

// Raw decoder output [B, 3, H, W] in about [-1, 1] -> IMAGE [B, H, W, 3] in [0, 1].
HostTensor decoded_to_image(const HostTensor& x) {
  HostTensor img = nchw_to_nhwc(x);
  for (int64_t i = 0; i < img.numel(); ++i)
    img.f32()[i] = std::clamp((img.f32()[i] + 1.0f) / 2.0f, 0.0f, 1.0f);
  return img;
}

Result<Autoencoder*> vae_of(const NodeInputs& in) {
  auto v = in.get<std::shared_ptr<const VAEValue>>("vae");
  if (!v || !*v || !(*v)->model || !(*v)->model->vae)
    return make_error(ErrorCode::INVALID_ARGUMENT, "vae input is not a loaded VAE");
  return (*v)->model->vae.get();
}

Result<const Latent*> latent_of(const NodeInputs& in, const std::string& name) {
  auto l = in.get<std::shared_ptr<const Latent>>(name);
  if (!l || !*l) return make_error(ErrorCode::INVALID_ARGUMENT, "{} input is not a latent", name);
  return l->get();
}

Result<const HostTensor*> image_of(const NodeInputs& in, const std::string& name) {
  auto i = in.get<std::shared_ptr<const ImageValue>>(name);
  if (!i || !*i || !(*i)->pixels)
    return make_error(ErrorCode::INVALID_ARGUMENT, "{} input is not an image", name);
  return (*i)->pixels.get();
}

std::vector<std::any> image_out(HostTensor img) {
  return {std::make_shared<const ImageValue>(ImageValue{share(std::move(img))})};
}

std::vector<std::any> latent_out(HostTensor samples, const Latent& like) {
  Latent l;
  l.samples = share(std::move(samples));
  l.batch_index = like.batch_index;
  l.noise_mask = like.noise_mask;
  return {std::make_shared<const Latent>(std::move(l))};
}

// Writes every image of the batch as PNG with the prompt in a tEXt chunk, under `prefix`
// confined to `dir` (ComfyUI's refusal otherwise, core/path_confine.h); fills ctx.ui.
Status save_images(ExecContext& ctx, const HostTensor& images, const std::string& dir,
                   const std::string& prefix, const std::string& type, int compress_level) {
  namespace fs = std::filesystem;
  if (ctx.opts.plan_run)  // Note [plan run]: refused as the run would be, nothing created
    return output_target_check(dir, prefix);
  HR_ASSIGN_OR_RETURN(OutputTarget target, output_target_make(dir, prefix));
  const Shape& s = images.shape();
  Json list = Json::array();
  for (int64_t b = 0; b < s[0]; ++b) {
    Image8 img;
    img.width = int(s[2]);
    img.height = int(s[1]);
    img.channels = 3;
    img.pixels.resize(size_t(s[1] * s[2] * 3));
    const float* src = images.f32() + b * s[1] * s[2] * s[3];
    for (int64_t i = 0; i < s[1] * s[2]; ++i)
      for (int c = 0; c < 3; ++c) {
        float v = 255.0f * src[i * s[3] + std::min<int64_t>(c, s[3] - 1)];
        img.pixels[size_t(i * 3 + c)] = uint8_t(std::clamp(v, 0.0f, 255.0f));
      }
    img.text.emplace_back("prompt", ctx.prompt.source.dump());
    img.compress_level = compress_level;
    HR_ASSIGN_OR_RETURN(std::string path, png_write_next(target.folder.string(), target.base, img));
    list.push_back({{"filename", fs::path(path).filename().string()},
                    {"subfolder", target.subfolder},
                    {"type", type}});
  }
  ctx.ui = Json{{"images", list}};
  return Status();
}

std::vector<std::string> input_images(const std::string& dir) {
  namespace fs = std::filesystem;
  std::vector<std::string> out;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return out;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.is_regular_file(ec) && e.path().extension() == ".png") out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

void nodes_register_images(NodeRegistry& r, const NodeEnv& env) {
  NodeDef dec;
  dec.class_type = "VAEDecode";
  dec.display_name = "VAE Decode";
  dec.category = "latent";
  dec.inputs = {spec_link("samples", IoType::LATENT), spec_link("vae", IoType::VAE)};
  dec.outputs = {{IoType::IMAGE, "IMAGE"}};
  dec.run = [](ExecContext& ctx, const NodeInputs& in) -> Result<std::vector<std::any>> {
    HR_ASSIGN_OR_RETURN(Autoencoder * m, vae_of(in));
    HR_ASSIGN_OR_RETURN(const Latent* l, latent_of(in, "samples"));
    // Whole, per image or tiled, as the plan fits (Note [VAE auto tiling] in models/sd/vae_tiled.cpp).
    HR_ASSIGN_OR_RETURN(VAEDecoded d, m->decode(*ctx.opts.executor, *l->samples,
                                                [&ctx] { return ctx.check_interrupt(); }));
    if (d.decision.mode != VAEMode::WHOLE) ctx.memory_decision(d.decision.reason);
    return image_out(decoded_to_image(d.image));
  };
  r.add(dec);

  NodeDef tiled;
  tiled.class_type = "VAEDecodeTiled";
  tiled.display_name = "VAE Decode (Tiled)";
  tiled.category = "_for_testing";
  tiled.inputs = {spec_link("samples", IoType::LATENT), spec_link("vae", IoType::VAE),
                  spec_int("tile_size", 512, 64, 4096, 32), spec_int("overlap", 64, 0, 4096, 32),
                  spec_int("temporal_size", 64, 8, 4096, 4),
                  spec_int("temporal_overlap", 8, 4, 4096, 4)};
  tiled.outputs = {{IoType::IMAGE, "IMAGE"}};
  tiled.run = [](ExecContext& ctx, const NodeInputs& in) -> Result<std::vector<std::any>> {
    HR_ASSIGN_OR_RETURN(Autoencoder * m, vae_of(in));
    HR_ASSIGN_OR_RETURN(const Latent* l, latent_of(in, "samples"));
    // VAEDecodeTiled.decode: the overlap is at most a quarter of the tile, both in pixels.
    int64_t tile_px = in.get_int("tile_size"), overlap_px = in.get_int("overlap");
    if (tile_px < overlap_px * 4) overlap_px = tile_px / 4;
    HR_ASSIGN_OR_RETURN(HostTensor x,
                        m->decode_tiled(*ctx.opts.executor, *l->samples,
                                        VAETileOptions{tile_px, overlap_px,
                                                       [&ctx] { return ctx.check_interrupt(); }}));
    return image_out(decoded_to_image(x));
  };
  r.add(tiled);

  NodeDef enc;
  enc.class_type = "VAEEncode";
  enc.display_name = "VAE Encode";
  enc.category = "latent";
  enc.inputs = {spec_link("pixels", IoType::IMAGE), spec_link("vae", IoType::VAE)};
  enc.outputs = {{IoType::LATENT, "LATENT"}};
  enc.run = [](ExecContext& ctx, const NodeInputs& in) -> Result<std::vector<std::any>> {
    HR_ASSIGN_OR_RETURN(Autoencoder * m, vae_of(in));
    HR_ASSIGN_OR_RETURN(const HostTensor* px, image_of(in, "pixels"));
    const Shape& s = px->shape();
    // ComfyUI vae_encode_crop_pixels: centre-crop to multiples of the VAE's downscale ratio
    // (8 for SD and Flux), keep RGB, map to [-1, 1].
    const int64_t d = m->downscale();
    int64_t h = s[1] / d * d, w = s[2] / d * d;
    if (h == 0 || w == 0)
      return make_error(ErrorCode::INVALID_ARGUMENT, "image {}x{} is smaller than {}x{}", s[2],
                        s[1], d, d);
    int64_t oy = (s[1] % d) / 2, ox = (s[2] % d) / 2;
    HostTensor img(DType::F32, Shape{s[0], 3, h, w});
    for (int64_t b = 0; b < s[0]; ++b)
      for (int64_t c = 0; c < 3; ++c)
        for (int64_t y = 0; y < h; ++y)
          for (int64_t x = 0; x < w; ++x)
            img.f32()[((b * 3 + c) * h + y) * w + x] =
                px->f32()[((b * s[1] + y + oy) * s[2] + x + ox) * s[3] + std::min<int64_t>(c, s[3] - 1)] * 2.0f - 1.0f;
    HR_ASSIGN_OR_RETURN(VAEEncoded e, m->encode(*ctx.opts.executor, img,
                                                [&ctx] { return ctx.check_interrupt(); }));
    if (e.decision.mode != VAEMode::WHOLE) ctx.memory_decision(e.decision.reason);
    Latent like;
    return latent_out(std::move(e.moments.mean), like);
  };
  r.add(enc);

  NodeDef save;
  save.class_type = "SaveImage";
  save.display_name = "Save Image";
  save.category = "image";
  save.output_node = true;
  save.inputs = {spec_link("images", IoType::IMAGE), spec_string("filename_prefix", "ComfyUI")};
  save.run = [](ExecContext& ctx, const NodeInputs& in) -> Result<std::vector<std::any>> {
    HR_ASSIGN_OR_RETURN(const HostTensor* px, image_of(in, "images"));
    HR_TRY(save_images(ctx, *px, ctx.opts.output_dir, in.get_string("filename_prefix"), "output", 4));
    return std::vector<std::any>{};
  };
  r.add(save);

  NodeDef prev;
  prev.class_type = "PreviewImage";
  prev.display_name = "Preview Image";
  prev.category = "image";
  prev.output_node = true;
  prev.inputs = {spec_link("images", IoType::IMAGE)};
  prev.run = [](ExecContext& ctx, const NodeInputs& in) -> Result<std::vector<std::any>> {
    HR_ASSIGN_OR_RETURN(const HostTensor* px, image_of(in, "images"));
    // ComfyUI PreviewImage: prefix "ComfyUI" + "_temp_" + five random letters (its alphabet,
    // 'p' twice and no 'w'), compress_level 1.
    static const char kLetters[] = "abcdefghijklmnopqrstupvxyz";
    std::mt19937 gen(std::random_device{}());
    std::string prefix = "ComfyUI_temp_";
    for (int i = 0; i < 5; ++i) prefix += kLetters[gen() % 26];
    HR_TRY(save_images(ctx, *px, ctx.opts.temp_dir, prefix, "temp", 1));
    return std::vector<std::any>{};
  };
  r.add(prev);

  NodeDef load;
  load.class_type = "LoadImage";
  load.display_name = "Load Image";
  load.category = "image";
  InputSpec image{.name = "image", .type = IoType::COMBO};
  std::string input_dir = env.input_dir;
  image.options_fn = [input_dir] { return input_images(input_dir); };
  load.inputs = {image};
  load.outputs = {{IoType::IMAGE, "IMAGE"}, {IoType::MASK, "MASK"}};
  load.run = [](ExecContext& ctx, const NodeInputs& in) -> Result<std::vector<std::any>> {
    HR_ASSIGN_OR_RETURN(std::filesystem::path file,
                        path_confine(ctx.opts.input_dir, in.get_string("image")));
    HR_ASSIGN_OR_RETURN(Image8 img, png_read(file.string()));
    HostTensor px(DType::F32, Shape{1, img.height, img.width, 3});
    // ComfyUI's mask is 1 - alpha (0 where opaque); without alpha, torch.zeros((64, 64)).
    bool alpha = img.channels == 4;
    HostTensor mask(DType::F32, alpha ? Shape{1, img.height, img.width} : Shape{1, 64, 64});
    for (int64_t i = 0; i < int64_t(img.width) * img.height; ++i) {
      for (int c = 0; c < 3; ++c) px.f32()[i * 3 + c] = float(img.pixels[size_t(i * img.channels + c)]) / 255.0f;
      if (alpha) mask.f32()[i] = 1.0f - float(img.pixels[size_t(i * 4 + 3)]) / 255.0f;
    }
    std::vector<std::any> out = image_out(std::move(px));
    out.emplace_back(std::make_shared<const MaskValue>(MaskValue{share(std::move(mask))}));
    return out;
  };
  r.add(load);

  NodeDef lu;
  lu.class_type = "LatentUpscale";
  lu.display_name = "Upscale Latent";
  lu.category = "latent";
  lu.inputs = {spec_link("samples", IoType::LATENT), spec_combo("upscale_method", latent_upscale_methods()),
               spec_int("width", 512, 0, kMaxResolution, 8), spec_int("height", 512, 0, kMaxResolution, 8),
               spec_combo("crop", {"disabled", "center"})};
  lu.outputs = {{IoType::LATENT, "LATENT"}};
  lu.run = [](ExecContext&, const NodeInputs& in) -> Result<std::vector<std::any>> {
    HR_ASSIGN_OR_RETURN(const Latent* l, latent_of(in, "samples"));
    const HostTensor& s = *l->samples;
    int64_t w = in.get_int("width"), h = in.get_int("height");
    if (w == 0 && h == 0) return latent_out(s.clone(), *l);
    if (w == 0) {
      h = std::max<int64_t>(64, h);
      w = std::max<int64_t>(64, int64_t(std::nearbyint(double(s.shape()[3]) * double(h) / double(s.shape()[2]))));
    } else if (h == 0) {
      w = std::max<int64_t>(64, w);
      h = std::max<int64_t>(64, int64_t(std::nearbyint(double(s.shape()[2]) * double(w) / double(s.shape()[3]))));
    } else {
      w = std::max<int64_t>(64, w);
      h = std::max<int64_t>(64, h);
    }
    HR_ASSIGN_OR_RETURN(HostTensor o, common_upscale(s, w / 8, h / 8, in.get_string("upscale_method"),
                                                     in.get_string("crop")));
    return latent_out(std::move(o), *l);
  };
  r.add(lu);

  NodeDef lub;
  lub.class_type = "LatentUpscaleBy";
  lub.display_name = "Upscale Latent By";
  lub.category = "latent";
  lub.inputs = {spec_link("samples", IoType::LATENT), spec_combo("upscale_method", latent_upscale_methods()),
                spec_float("scale_by", 1.5, 0.01, 8.0, 0.01)};
  lub.outputs = {{IoType::LATENT, "LATENT"}};
  lub.run = [](ExecContext&, const NodeInputs& in) -> Result<std::vector<std::any>> {
    HR_ASSIGN_OR_RETURN(const Latent* l, latent_of(in, "samples"));
    const HostTensor& s = *l->samples;
    double k = in.get_float("scale_by");
    int64_t w = int64_t(std::nearbyint(double(s.shape()[3]) * k));
    int64_t h = int64_t(std::nearbyint(double(s.shape()[2]) * k));
    if (w < 1 || h < 1 || double(w) * double(h) > kMaxResolution * kMaxResolution / 64)
      return make_error(ErrorCode::INVALID_ARGUMENT, "scaled latent {}x{} is out of range", w, h);
    HR_ASSIGN_OR_RETURN(HostTensor o, common_upscale(s, w, h, in.get_string("upscale_method"), "disabled"));
    return latent_out(std::move(o), *l);
  };
  r.add(lub);

  NodeDef is;
  is.class_type = "ImageScale";
  is.display_name = "Upscale Image";
  is.category = "image/upscaling";
  is.inputs = {spec_link("image", IoType::IMAGE), spec_combo("upscale_method", image_upscale_methods()),
               spec_int("width", 512, 0, kMaxResolution), spec_int("height", 512, 0, kMaxResolution),
               spec_combo("crop", {"disabled", "center"})};
  is.outputs = {{IoType::IMAGE, "IMAGE"}};
  is.run = [](ExecContext&, const NodeInputs& in) -> Result<std::vector<std::any>> {
    HR_ASSIGN_OR_RETURN(const HostTensor* px, image_of(in, "image"));
    int64_t w = in.get_int("width"), h = in.get_int("height");
    const Shape& s = px->shape();
    if (w == 0 && h == 0) return image_out(px->clone());
    if (w == 0) w = std::max<int64_t>(1, int64_t(std::nearbyint(double(s[2]) * double(h) / double(s[1]))));
    if (h == 0) h = std::max<int64_t>(1, int64_t(std::nearbyint(double(s[1]) * double(w) / double(s[2]))));
    HR_ASSIGN_OR_RETURN(HostTensor o, common_upscale(nhwc_to_nchw(*px), w, h,
                                                     in.get_string("upscale_method"), in.get_string("crop")));
    // ComfyUI's ImageScale returns common_upscale's result unclamped (bicubic overshoots).
    return image_out(nchw_to_nhwc(o));
  };
  r.add(is);
}

}  // namespace hr
