"""The three SD1 models, written so that state_dict() names are the LDM single-file names
(without their prefixes): the UNet (openaimodel.UNetModel), the VAE (AutoencoderKL) and the
CLIP text encoder (HF CLIPTextModel, `text_model.*`).

The math follows ../shared/golden/README.md, which is what headroom implements: GroupNorm(32)
eps 1e-5 in ResBlocks and the UNet output, 1e-6 in SpatialTransformer.norm and everywhere in the
VAE; LayerNorm eps 1e-5; GEGLU (gelu with erf on the second half); conv 1x1 proj_in/proj_out;
shortcuts exactly where widths differ; VAE downsampling pads right/bottom by one, then a 3x3
stride-2 conv without padding.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

GROUPS = 32


def attention(q, k, v, heads, causal=False):
    """q [B, N, C], k/v [B, M, C] -> [B, N, C]; softmax(q k^T / sqrt(d)) v per head."""
    b, n, c = q.shape
    d = c // heads
    q, k, v = (t.reshape(b, -1, heads, d).transpose(1, 2) for t in (q, k, v))
    if hasattr(F, "scaled_dot_product_attention"):
        o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    else:
        w = (q @ k.transpose(-1, -2)) * (d ** -0.5)
        if causal:
            mask = torch.ones(n, k.shape[2], dtype=torch.bool, device=q.device).triu(1)
            w = w.masked_fill(mask, float("-inf"))
        o = w.softmax(-1) @ v
    return o.transpose(1, 2).reshape(b, n, c)


def group_norm(ch, eps):
    return nn.GroupNorm(GROUPS, ch, eps=eps)


# ---------------------------------------------------------------------------------------------
# UNet


def timestep_embedding(t, dim, max_period=10000.0):
    half = dim // 2
    freqs = torch.exp(-math.log(max_period) * torch.arange(half, dtype=torch.float32, device=t.device) / half)
    args = t.float()[:, None] * freqs[None]
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)


class ResBlock(nn.Module):
    def __init__(self, cin, cout, emb_dim):
        super().__init__()
        self.in_layers = nn.Sequential(group_norm(cin, 1e-5), nn.SiLU(), nn.Conv2d(cin, cout, 3, padding=1))
        self.emb_layers = nn.Sequential(nn.SiLU(), nn.Linear(emb_dim, cout))
        self.out_layers = nn.Sequential(group_norm(cout, 1e-5), nn.SiLU(), nn.Dropout(0.0),
                                        nn.Conv2d(cout, cout, 3, padding=1))
        self.skip_connection = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x, emb, context):
        h = self.in_layers(x)
        h = h + self.emb_layers(emb)[:, :, None, None]
        return self.skip_connection(x) + self.out_layers(h)


class CrossAttention(nn.Module):
    def __init__(self, ch, ctx_dim, heads):
        super().__init__()
        self.heads = heads
        self.to_q = nn.Linear(ch, ch, bias=False)
        self.to_k = nn.Linear(ctx_dim, ch, bias=False)
        self.to_v = nn.Linear(ctx_dim, ch, bias=False)
        self.to_out = nn.Sequential(nn.Linear(ch, ch), nn.Dropout(0.0))

    def forward(self, x, ctx):
        return self.to_out(attention(self.to_q(x), self.to_k(ctx), self.to_v(ctx), self.heads))


class GEGLU(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.proj = nn.Linear(cin, cout * 2)

    def forward(self, x):
        x, gate = self.proj(x).chunk(2, dim=-1)
        return x * F.gelu(gate)


class FeedForward(nn.Module):
    def __init__(self, ch):
        super().__init__()
        self.net = nn.Sequential(GEGLU(ch, 4 * ch), nn.Dropout(0.0), nn.Linear(4 * ch, ch))

    def forward(self, x):
        return self.net(x)


class BasicTransformerBlock(nn.Module):
    def __init__(self, ch, ctx_dim, heads):
        super().__init__()
        self.attn1 = CrossAttention(ch, ch, heads)
        self.ff = FeedForward(ch)
        self.attn2 = CrossAttention(ch, ctx_dim, heads)
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(ch, eps=1e-5) for _ in range(3))

    def forward(self, x, ctx):
        h = self.norm1(x)
        x = self.attn1(h, h) + x
        x = self.attn2(self.norm2(x), ctx) + x
        return self.ff(self.norm3(x)) + x


class SpatialTransformer(nn.Module):
    def __init__(self, ch, ctx_dim, heads, depth):
        super().__init__()
        self.norm = group_norm(ch, 1e-6)
        self.proj_in = nn.Conv2d(ch, ch, 1)
        self.transformer_blocks = nn.ModuleList(BasicTransformerBlock(ch, ctx_dim, heads) for _ in range(depth))
        self.proj_out = nn.Conv2d(ch, ch, 1)

    def forward(self, x, emb, context):
        b, c, h, w = x.shape
        t = self.proj_in(self.norm(x)).reshape(b, c, h * w).transpose(1, 2)
        for blk in self.transformer_blocks:
            t = blk(t, context)
        return self.proj_out(t.transpose(1, 2).reshape(b, c, h, w)) + x


class Downsample(nn.Module):
    def __init__(self, ch):
        super().__init__()
        self.op = nn.Conv2d(ch, ch, 3, stride=2, padding=1)

    def forward(self, x, emb, context):
        return self.op(x)


class Upsample(nn.Module):
    def __init__(self, ch):
        super().__init__()
        self.conv = nn.Conv2d(ch, ch, 3, padding=1)

    def forward(self, x, emb, context):
        return self.conv(F.interpolate(x, scale_factor=2, mode="nearest"))


class ConvIn(nn.Conv2d):
    def forward(self, x, emb, context):
        return super().forward(x)


class Seq(nn.ModuleList):
    """TimestepEmbedSequential: children take (x, emb, context)."""

    def forward(self, x, emb, context):
        for m in self:
            x = m(x, emb, context)
        return x


class UNet(nn.Module):
    """cfg: model_channels, channel_mult, num_res_blocks, attention_levels (level indices with a
    depth-1 SpatialTransformer), middle_attention, context_dim, num_head_channels."""

    def __init__(self, cfg):
        super().__init__()
        mc, mult, nres = cfg["model_channels"], cfg["channel_mult"], cfg["num_res_blocks"]
        attn_levels, ctx, hc = set(cfg["attention_levels"]), cfg["context_dim"], cfg["num_head_channels"]
        ted = cfg["time_embed_dim"]
        self.mc = mc
        self.time_embed = nn.Sequential(nn.Linear(mc, ted), nn.SiLU(), nn.Linear(ted, ted))
        self.input_blocks = nn.ModuleList([Seq([ConvIn(cfg["in_channels"], mc, 3, padding=1)])])
        chans, ch = [mc], mc
        for level, m in enumerate(mult):
            for _ in range(nres):
                layers = [ResBlock(ch, m * mc, ted)]
                ch = m * mc
                if level in attn_levels:
                    layers.append(SpatialTransformer(ch, ctx, ch // hc, 1))
                self.input_blocks.append(Seq(layers))
                chans.append(ch)
            if level != len(mult) - 1:
                self.input_blocks.append(Seq([Downsample(ch)]))
                chans.append(ch)
        mid = [ResBlock(ch, ch, ted)]
        if cfg["middle_attention"]:
            mid.append(SpatialTransformer(ch, ctx, ch // hc, 1))
        mid.append(ResBlock(ch, ch, ted))
        self.middle_block = Seq(mid)
        self.output_blocks = nn.ModuleList()
        for level in reversed(range(len(mult))):
            for i in range(nres + 1):
                layers = [ResBlock(ch + chans.pop(), mult[level] * mc, ted)]
                ch = mult[level] * mc
                if level in attn_levels:
                    layers.append(SpatialTransformer(ch, ctx, ch // hc, 1))
                if level and i == nres:
                    layers.append(Upsample(ch))
                self.output_blocks.append(Seq(layers))
        self.out = nn.Sequential(group_norm(ch, 1e-5), nn.SiLU(), nn.Conv2d(ch, cfg["out_channels"], 3, padding=1))

    def forward(self, x, t, context):
        emb = self.time_embed(timestep_embedding(t, self.mc).to(x.dtype))
        hs, h = [], x
        for blk in self.input_blocks:
            h = blk(h, emb, context)
            hs.append(h)
        h = self.middle_block(h, emb, context)
        for blk in self.output_blocks:
            h = blk(torch.cat([h, hs.pop()], dim=1), emb, context)
        return self.out(h)


# ---------------------------------------------------------------------------------------------
# VAE


class ResnetBlock(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.norm1 = group_norm(cin, 1e-6)
        self.conv1 = nn.Conv2d(cin, cout, 3, padding=1)
        self.norm2 = group_norm(cout, 1e-6)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1)
        if cin != cout:
            self.nin_shortcut = nn.Conv2d(cin, cout, 1)

    def forward(self, x):
        h = self.conv1(F.silu(self.norm1(x)))
        h = self.conv2(F.silu(self.norm2(h)))
        return (self.nin_shortcut(x) if hasattr(self, "nin_shortcut") else x) + h


class AttnBlock(nn.Module):
    def __init__(self, ch):
        super().__init__()
        self.norm = group_norm(ch, 1e-6)
        self.q, self.k, self.v, self.proj_out = (nn.Conv2d(ch, ch, 1) for _ in range(4))

    def forward(self, x):
        b, c, h, w = x.shape
        n = self.norm(x)
        q, k, v = (m(n).reshape(b, c, h * w).transpose(1, 2) for m in (self.q, self.k, self.v))
        a = attention(q, k, v, 1).transpose(1, 2).reshape(b, c, h, w)
        return x + self.proj_out(a)


class Mid(nn.Module):
    def __init__(self, ch):
        super().__init__()
        self.block_1, self.attn_1, self.block_2 = ResnetBlock(ch, ch), AttnBlock(ch), ResnetBlock(ch, ch)

    def forward(self, x):
        return self.block_2(self.attn_1(self.block_1(x)))


class DownConv(nn.Module):
    def __init__(self, ch):
        super().__init__()
        self.conv = nn.Conv2d(ch, ch, 3, stride=2, padding=0)

    def forward(self, x):
        return self.conv(F.pad(x, (0, 1, 0, 1)))


class UpConv(nn.Module):
    def __init__(self, ch):
        super().__init__()
        self.conv = nn.Conv2d(ch, ch, 3, padding=1)

    def forward(self, x):
        return self.conv(F.interpolate(x, scale_factor=2, mode="nearest"))


class Encoder(nn.Module):
    def __init__(self, ch, mult, nres, z):
        super().__init__()
        self.conv_in = nn.Conv2d(3, ch, 3, padding=1)
        self.down = nn.ModuleList()
        cin = ch
        for level, m in enumerate(mult):
            lv = nn.Module()
            lv.block = nn.ModuleList()
            for _ in range(nres):
                lv.block.append(ResnetBlock(cin, ch * m))
                cin = ch * m
            if level != len(mult) - 1:
                lv.downsample = DownConv(cin)
            self.down.append(lv)
        self.mid = Mid(cin)
        self.norm_out = group_norm(cin, 1e-6)
        self.conv_out = nn.Conv2d(cin, 2 * z, 3, padding=1)

    def forward(self, x):
        h = self.conv_in(x)
        for lv in self.down:
            for blk in lv.block:
                h = blk(h)
            if hasattr(lv, "downsample"):
                h = lv.downsample(h)
        return self.conv_out(F.silu(self.norm_out(self.mid(h))))


class Decoder(nn.Module):
    def __init__(self, ch, mult, nres, z):
        super().__init__()
        cin = ch * mult[-1]
        self.conv_in = nn.Conv2d(z, cin, 3, padding=1)
        self.mid = Mid(cin)
        ups = [None] * len(mult)
        for level in reversed(range(len(mult))):
            lv = nn.Module()
            lv.block = nn.ModuleList()
            for _ in range(nres + 1):
                lv.block.append(ResnetBlock(cin, ch * mult[level]))
                cin = ch * mult[level]
            if level != 0:
                lv.upsample = UpConv(cin)
            ups[level] = lv
        self.up = nn.ModuleList(ups)
        self.norm_out = group_norm(cin, 1e-6)
        self.conv_out = nn.Conv2d(cin, 3, 3, padding=1)

    def forward(self, z):
        h = self.mid(self.conv_in(z))
        for lv in reversed(self.up):
            for blk in lv.block:
                h = blk(h)
            if hasattr(lv, "upsample"):
                h = lv.upsample(h)
        return self.conv_out(F.silu(self.norm_out(h)))


class VAE(nn.Module):
    """AutoencoderKL; encode gives (mean, logvar) of the VAE-space latent."""

    def __init__(self, cfg):
        super().__init__()
        ch, mult, nres, z = cfg["ch"], cfg["ch_mult"], cfg["num_res_blocks"], cfg["z_channels"]
        self.encoder = Encoder(ch, mult, nres, z)
        self.decoder = Decoder(ch, mult, nres, z)
        self.quant_conv = nn.Conv2d(2 * z, 2 * z, 1)
        self.post_quant_conv = nn.Conv2d(z, z, 1)

    def encode(self, x):
        mean, logvar = self.quant_conv(self.encoder(x)).chunk(2, dim=1)
        return mean, logvar.clamp(-30.0, 20.0)

    def decode(self, z):
        return self.decoder(self.post_quant_conv(z))


# ---------------------------------------------------------------------------------------------
# CLIP text encoder


class CLIPAttention(nn.Module):
    def __init__(self, ch, heads):
        super().__init__()
        self.heads = heads
        self.q_proj, self.k_proj, self.v_proj, self.out_proj = (nn.Linear(ch, ch) for _ in range(4))

    def forward(self, x):
        return self.out_proj(attention(self.q_proj(x), self.k_proj(x), self.v_proj(x), self.heads, causal=True))


class CLIPMLP(nn.Module):
    def __init__(self, ch, mlp):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(ch, mlp), nn.Linear(mlp, ch)

    def forward(self, x):
        h = self.fc1(x)
        return self.fc2(h * torch.sigmoid(1.702 * h))  # quick_gelu


class CLIPLayer(nn.Module):
    def __init__(self, ch, heads, mlp):
        super().__init__()
        self.self_attn = CLIPAttention(ch, heads)
        self.layer_norm1 = nn.LayerNorm(ch, eps=1e-5)
        self.mlp = CLIPMLP(ch, mlp)
        self.layer_norm2 = nn.LayerNorm(ch, eps=1e-5)

    def forward(self, x):
        x = x + self.self_attn(self.layer_norm1(x))
        return x + self.mlp(self.layer_norm2(x))


class CLIPText(nn.Module):
    """HF CLIPTextModel's text_model with a compact token table.

    Note [compact token table]: captions use a few dozen of the 49408 BPE ids. Only those rows
    are parameters (`used_ids` lists them; every other id reads a zero row), so the optimizer
    state stays small and the exported table is zero outside them: a word the model never saw
    adds nothing but its position embedding.
    """

    def __init__(self, cfg, used_ids):
        super().__init__()
        ch = cfg["width"]
        self.vocab, self.positions = cfg["vocab"], cfg["positions"]
        self.register_buffer("used_ids", torch.tensor(sorted(used_ids), dtype=torch.long))
        lookup = torch.full((self.vocab,), len(used_ids), dtype=torch.long)
        lookup[self.used_ids] = torch.arange(len(used_ids))
        self.register_buffer("lookup", lookup, persistent=False)
        self.token_rows = nn.Parameter(torch.randn(len(used_ids), ch) * 0.02)
        self.position_embedding = nn.Parameter(torch.randn(self.positions, ch) * 0.01)
        self.layers = nn.ModuleList(CLIPLayer(ch, cfg["heads"], cfg["mlp"]) for _ in range(cfg["layers"]))
        self.final_layer_norm = nn.LayerNorm(ch, eps=1e-5)

    def forward(self, ids):
        table = torch.cat([self.token_rows, self.token_rows.new_zeros(1, self.token_rows.shape[1])])
        x = table[self.lookup[ids]] + self.position_embedding
        for layer in self.layers:
            x = layer(x)
        return self.final_layer_norm(x)

    def ldm_state(self):
        """Tensors under HF names, relative to `text_model.`."""
        table = self.token_rows.new_zeros(self.vocab, self.token_rows.shape[1])
        table[self.used_ids] = self.token_rows
        out = {"embeddings.token_embedding.weight": table,
               "embeddings.position_embedding.weight": self.position_embedding,
               "embeddings.position_ids": torch.arange(self.positions, dtype=torch.long)[None]}
        for k, v in self.state_dict().items():
            if k.startswith("layers."):
                out["encoder." + k] = v
            elif k.startswith("final_layer_norm."):
                out[k] = v
        return out

    def load_ldm_state(self, sd):
        table = sd["embeddings.token_embedding.weight"]
        with torch.no_grad():
            self.token_rows.copy_(table[self.used_ids])
            self.position_embedding.copy_(sd["embeddings.position_embedding.weight"])
        rest = {k[len("encoder."):] if k.startswith("encoder.") else k: v for k, v in sd.items()
                if not k.startswith("embeddings.")}
        missing, unexpected = self.load_state_dict(rest, strict=False)
        missing = [m for m in missing if m not in ("token_rows", "position_embedding", "used_ids")]
        if missing or unexpected:
            raise KeyError(f"CLIP state: missing {missing}, unexpected {unexpected}")
