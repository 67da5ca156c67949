// The LDM AutoencoderKL (the SD1/SD2/SDXL VAE, and Flux's 16-channel one without quant convs:
// Note [flux vae] in models/flux/flux_vae_make.h): configuration read from checkpoint tensors and
// the decode / encode graphs for concrete shapes. Weight names are the file's with the VAE's
// prefix ("first_stage_model.", Flux's "vae.", or none) stripped.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "graph/executor.h"
#include "graph/graph.h"
#include "models/autoencoder.h"
#include "models/safetensors.h"

namespace hr {

class WeightSet;

struct VAEConfig {
  int in_channels = 3;   // image channels (encoder input)
  int out_channels = 3;  // image channels (decoder output)
  int ch = 128;
  std::vector<int> ch_mult = {1, 2, 4, 4};
  int num_res_blocks = 2;  // encoder blocks per level; the decoder has num_res_blocks + 1
  int z_channels = 4;
  int embed_dim = 4;
  bool use_quant_conv = true;  // quant_conv / post_quant_conv present

  int levels() const { return int(ch_mult.size()); }
  // Image pixels per latent pixel along each axis: 2^(levels - 1).
  int downscale() const { return 1 << (levels() - 1); }
  bool operator==(const VAEConfig&) const = default;
  std::string str() const;
};

// The full-size SD/SDXL VAE (ch 128, mult 1,2,4,4).
VAEConfig vae_config_sd();

// Reads the configuration from the shapes of the tensors whose names start with `prefix`.
// NOT_FOUND names the first tensor a VAE needs that is missing.
Result<VAEConfig> vae_config_detect(const SafetensorsFile& file, std::string_view prefix);

// Note [vae channels]
// A VAE takes latents of exactly its embed_dim channels (4 for SD, 16 for Flux: z_channels from
// decoder.conv_in) and images of its in_channels. A latent of another width (a Flux latent
// given to an SD VAE, or the reverse) is refused before any graph is built, with a message that
// names both counts, rather than failing deep in the executor on a shape.
// INVALID_ARGUMENT when `shape` is not [B, C, H, W] with C what the VAE takes: latents
// (decode) or images (encode). `what` starts the message (e.g. "vae_decode_auto (the VAE of
// ae.safetensors)").
Status vae_input_check(const VAEConfig& cfg, const Shape& shape, bool decode,
                       std::string_view what);

// Decode: INPUT "latent" [B, embed_dim, h, w] in VAE space (a model-space latent after the
// family's LatentFormat::process_out) -> post_quant_conv -> decoder. OUTPUT "image"
// [B, out_channels, h * downscale, w * downscale], raw (about [-1, 1]; no clamp).
Result<Graph> vae_decode_graph(const VAEConfig& cfg, int64_t batch, int64_t height,
                               int64_t width, DType dtype);

// Encode: INPUT "image" [B, in_channels, H, W] in [-1, 1] -> encoder -> quant_conv. OUTPUTs
// "mean" and "logvar" [B, embed_dim, ~H / downscale, ~W / downscale]. logvar is NOT clamped
// in the graph (the op set has no clamp); vae_encode clamps it to [-30, 20] on the host.
Result<Graph> vae_encode_graph(const VAEConfig& cfg, int64_t batch, int64_t height,
                               int64_t width, DType dtype);

// Runners: inputs of another float dtype are converted to `dtype`; outputs are f32.
Result<HostTensor> vae_decode(Executor& ex, const VAEConfig& cfg, WeightSet& weights, DType dtype,
                              const HostTensor& latent);
Result<VAEMoments> vae_encode(Executor& ex, const VAEConfig& cfg, WeightSet& weights, DType dtype,
                              const HostTensor& image);

}  // namespace hr
