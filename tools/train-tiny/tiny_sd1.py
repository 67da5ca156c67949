"""The tiny SD1 checkpoint: building the three models from config.json, exporting them as an
SD1 single-file safetensors (f16) with its LDM yaml, and reading such a file back."""
import json
import os

import torch

import safetensors_io
import shapes
from clip_bpe import BOS, EOS
from ldm import UNet, VAE, CLIPText

HERE = os.path.dirname(os.path.abspath(__file__))
UNET, VAE_PREFIX, CLIP = "model.diffusion_model.", "first_stage_model.", "cond_stage_model.transformer.text_model."


def load_config(path=os.path.join(HERE, "config.json")):
    with open(path) as f:
        return json.load(f)


def used_token_ids(tokenizer):
    """Every id a training caption can produce (Note [compact token table] in ldm.py)."""
    ids = {BOS, EOS}
    for word in shapes.caption_vocabulary():
        ids.update(tokenizer.encode(word))
    return sorted(ids)


def build(cfg, tokenizer):
    return UNet(cfg["unet"]), VAE(cfg["vae"]), CLIPText(cfg["clip"], used_token_ids(tokenizer))


def checkpoint_tensors(unet, vae, clip):
    out = {UNET + k: v for k, v in unet.state_dict().items()}
    out.update({VAE_PREFIX + k: v for k, v in vae.state_dict().items()})
    out.update({CLIP + k: v for k, v in clip.ldm_state().items()})
    return {k: (v.half() if v.is_floating_point() else v) for k, v in out.items()}


def metadata(cfg, extra):
    meta = {
        "headroom.arch": "sd1-tiny-shapes",
        "headroom.unet.num_head_channels": str(cfg["unet"]["num_head_channels"]),
        "headroom.clip.heads": str(cfg["clip"]["heads"]),
        "modelspec.prediction_type": "epsilon",
        "headroom.train.config": json.dumps(cfg, sort_keys=True),
    }
    meta.update(extra)
    return meta


def ldm_yaml(cfg):
    """The LDM config beside the checkpoint (what A1111/ComfyUI's CheckpointLoader read)."""
    u, v = cfg["unet"], cfg["vae"]
    attn_res = [2 ** level for level in u["attention_levels"]]
    return f"""# headroom-tiny-sd1: a tiny SD1 trained on generated shapes (tools/train-tiny).
model:
  base_learning_rate: 1.0e-04
  target: ldm.models.diffusion.ddpm.LatentDiffusion
  params:
    linear_start: 0.00085
    linear_end: 0.0120
    num_timesteps_cond: 1
    log_every_t: 200
    timesteps: 1000
    first_stage_key: "jpg"
    cond_stage_key: "txt"
    image_size: 32
    channels: 4
    cond_stage_trainable: false
    conditioning_key: crossattn
    monitor: val/loss_simple_ema
    scale_factor: 0.18215
    use_ema: False
    parameterization: eps
    unet_config:
      target: ldm.modules.diffusionmodules.openaimodel.UNetModel
      params:
        image_size: 32
        in_channels: {u["in_channels"]}
        out_channels: {u["out_channels"]}
        model_channels: {u["model_channels"]}
        attention_resolutions: {attn_res}
        num_res_blocks: {u["num_res_blocks"]}
        channel_mult: {u["channel_mult"]}
        num_head_channels: {u["num_head_channels"]}
        use_spatial_transformer: True
        transformer_depth: 1
        context_dim: {u["context_dim"]}
        use_checkpoint: False
        legacy: False
    first_stage_config:
      target: ldm.models.autoencoder.AutoencoderKL
      params:
        embed_dim: {v["z_channels"]}
        monitor: val/rec_loss
        ddconfig:
          double_z: true
          z_channels: {v["z_channels"]}
          resolution: 256
          in_channels: 3
          out_ch: 3
          ch: {v["ch"]}
          ch_mult: {v["ch_mult"]}
          num_res_blocks: {v["num_res_blocks"]}
          attn_resolutions: []
          dropout: 0.0
        lossconfig:
          target: torch.nn.Identity
    cond_stage_config:
      target: ldm.modules.encoders.modules.FrozenCLIPEmbedder
# headroom's block: the text encoder's heads (CLIP width {cfg["clip"]["width"]}, {cfg["clip"]["layers"]} layers).
headroom:
  text_encoder_heads: [{cfg["clip"]["heads"]}]
"""


def export(path, models, cfg, extra_meta=None):
    """Writes <path> (f16 safetensors) and <path minus .safetensors>.yaml."""
    safetensors_io.write(path, checkpoint_tensors(*models), metadata(cfg, extra_meta or {}))
    with open(os.path.splitext(path)[0] + ".yaml", "w") as f:
        f.write(ldm_yaml(cfg))


def load(path, cfg, tokenizer):
    """The three models with a checkpoint's weights (f16 values upcast to f32)."""
    tensors, _ = safetensors_io.read(path)
    unet, vae, clip = build(cfg, tokenizer)

    def part(prefix):
        return {k[len(prefix):]: v for k, v in tensors.items() if k.startswith(prefix)}

    unet.load_state_dict(part(UNET))
    vae.load_state_dict(part(VAE_PREFIX))
    clip.load_ldm_state(part(CLIP))
    return unet.eval(), vae.eval(), clip.eval()


@torch.no_grad()
def fold_latent_normalization(vae, mean, std, scale=0.18215):
    """Note [latent normalisation]: rescales the VAE so that its latent z' = (z - mean) / (std
    * scale) per channel; then z' * scale (the model-space latent headroom and ComfyUI feed the
    UNet) has mean 0 and std 1, as the noise schedule expects. Exact: quant_conv and
    post_quant_conv are 1x1 convolutions, so the affine map folds into their weights."""
    k = 1.0 / (std * scale)
    zc = mean.numel()
    qw, qb = vae.quant_conv.weight, vae.quant_conv.bias
    qw[:zc] *= k[:, None, None, None]
    qb[:zc] = (qb[:zc] - mean) * k
    qb[zc:] += 2 * torch.log(k)  # logvar of z' = logvar of z + 2 ln k
    pw, pb = vae.post_quant_conv.weight, vae.post_quant_conv.bias
    pb += (pw[:, :, 0, 0] @ mean)
    pw /= k[None, :, None, None]
