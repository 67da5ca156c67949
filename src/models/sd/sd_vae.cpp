// SDVAE: the LDM VAE as an Autoencoder and its factory.
#include "models/weight_load.h"
#include "models/weight_format.h"
#include "models/sd/sd_vae.h"

#include "models/checkpoint.h"
#include "models/sd/vae_tiled.h"

namespace hr {

Result<VAEDecision> SDVAE::decode_decide(Executor& ex, const Shape& latent_shape) {
  return vae_decode_decide(ex, *this, latent_shape);
}
Result<VAEDecision> SDVAE::encode_decide(Executor& ex, const Shape& image_shape) {
  return vae_encode_decide(ex, *this, image_shape);
}
Result<VAEDecoded> SDVAE::decode(Executor& ex, const HostTensor& latent,
                                 const std::function<Status()>& before_tile) {
  return vae_decode_auto(ex, *this, latent, before_tile);
}
Result<VAEEncoded> SDVAE::encode(Executor& ex, const HostTensor& image,
                                 const std::function<Status()>& before_tile) {
  return vae_encode_auto(ex, *this, image, before_tile);
}
Result<HostTensor> SDVAE::decode_tiled(Executor& ex, const HostTensor& latent,
                                       const VAETileOptions& tiles) {
  return vae_decode_tiled(ex, *this, latent, tiles);
}

Result<std::unique_ptr<Autoencoder>> sd_vae_create(const ComponentLoad& load) {
  HR_ASSIGN_OR_RETURN(VAEConfig cfg, vae_config_detect(*load.file, load.info.vae_prefix));
  // fp8 VAE weights are widened at load (exact without a scale); scaled ones are refused rather
  // than drawn wrong (Note [fp8 weights] in graph/graph.h covers the UNet and text encoders).
  HR_ASSIGN_OR_RETURN(WeightFormats formats, weight_formats_read(*load.file, load.info.vae_prefix));
  if (!formats.scales.empty())
    return make_error(ErrorCode::UNSUPPORTED, "{}: the VAE's weights are stored as {} with "
                      "scales (e.g. '{}{}'); headroom computes scaled fp8 only in diffusion models "
                      "and text encoders", load.info.path, formats.kind, load.info.vae_prefix,
                      *formats.scales.begin());
  auto vae = std::make_unique<SDVAE>(std::move(cfg), load.options.vae_dtype, load.info.path);
  HR_TRY(weights_load_prefix(vae->store, load.file, load.info.vae_prefix, load.options.vae_dtype)
             .with_context("loading the VAE"));
  return std::unique_ptr<Autoencoder>(std::move(vae));
}

SDVAE* sd_vae(LoadedModel& model) { return dynamic_cast<SDVAE*>(model.vae.get()); }

Result<HostTensor> vae_decode(Executor& ex, SDVAE& vae, const HostTensor& latent) {
  return vae_decode(ex, vae.config, vae.store, vae.dtype, latent);
}
Result<VAEMoments> vae_encode(Executor& ex, SDVAE& vae, const HostTensor& image) {
  return vae_encode(ex, vae.config, vae.store, vae.dtype, image);
}

}  // namespace hr
