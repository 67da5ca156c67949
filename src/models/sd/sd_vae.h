// The SD families' autoencoder component: the LDM AutoencoderKL with its weights (also Flux's,
// Note [flux vae]), run whole, per image or tiled (sd/vae_tiled.h).
#pragma once

#include <memory>
#include <string>

#include "models/autoencoder.h"
#include "models/family.h"
#include "models/sd/vae.h"

namespace hr {

struct LoadedModel;

class SDVAE final : public Autoencoder {
 public:
  SDVAE(VAEConfig config, DType dtype, std::string path)
      : config(std::move(config)), dtype(dtype), path(std::move(path)) {}

  WeightSet& weights() override { return store; }
  int64_t downscale() const override { return config.downscale(); }
  int latent_channels() const override { return int(config.embed_dim); }
  Result<VAEDecision> decode_decide(Executor& ex, const Shape& latent_shape) override;
  Result<VAEDecision> encode_decide(Executor& ex, const Shape& image_shape) override;
  Result<VAEDecoded> decode(Executor& ex, const HostTensor& latent,
                            const std::function<Status()>& before_tile) override;
  Result<VAEEncoded> encode(Executor& ex, const HostTensor& image,
                            const std::function<Status()>& before_tile) override;
  Result<HostTensor> decode_tiled(Executor& ex, const HostTensor& latent,
                                  const VAETileOptions& tiles) override;

  VAEConfig config;
  DType dtype = DType::F32;  // compute dtype
  std::string path;          // the file it came from, for messages
  WeightSet store;
};

// The family's factory: the VAE's config from the tensors, its weights in options.vae_dtype.
Result<std::unique_ptr<Autoencoder>> sd_vae_create(const ComponentLoad& load);

// The VAE of a loaded SD model, or null (tests and benchmarks).
SDVAE* sd_vae(LoadedModel& model);
// One untiled run of the whole batch (vae_decode / vae_encode on the component).
Result<HostTensor> vae_decode(Executor& ex, SDVAE& vae, const HostTensor& latent);
Result<VAEMoments> vae_encode(Executor& ex, SDVAE& vae, const HostTensor& image);

}  // namespace hr
