// Tiled VAE decode / encode with ComfyUI's blending, and the plan-driven choice between whole,
// per-image and tiled runs.
#include "models/sd/vae_tiled.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include "core/bytes.h"
#include "graph/planner.h"
#include "graph/residency.h"
#include "memory/residency_planner.h"

namespace hr {

// Note [tiled scale]
// ComfyUI's tiled_scale_multidim (comfy/utils.py), per image: tiles start every tile - overlap
// input pixels, clamped to size - overlap (so the last one is shorter, not shifted back); each
// tile's output is weighted by a mask that ramps (t + 1) / feather over feather = round(overlap
// * scale) output pixels on every side (no ramp along an axis where the tile is not wider than
// that), added into the output at round(start * scale), and the sum is divided by the summed
// masks. An image that fits in one tile is run whole. VAE.decode_tiled_ / encode_tiled_ average
// three such tilings, (height x width) 2t x t/2, t/2 x 2t and t x t (decode; encode sums them in
// the reverse order), so that no seam falls in the same place in all three. Because every tile runs
// the model on its own, GroupNorm statistics and attention are per tile: a tiled result is close to
// the untiled one, not equal, unless one tile covers the image.

// Note [VAE auto tiling]
// The plan is the data: vae_*_decide builds the untiled graph for the input's shape and reads
// the executor's planned arena. If it exceeds Executor::arena_room() (the budget less what the
// allocator holds besides this executor's arena), a batch is tried one image at a time, then
// one square tiling with feathered overlaps at the largest tile whose graphs all fit: for each
// candidate the exact tile shapes it would run are built and planned, and the largest arena
// among them is compared with the room. (ComfyUI's three tilings averaged, Note [tiled scale],
// hide seams at three times the work; one tiling whose overlap is a quarter of the tile,
// blended by a linear ramp, shows none in the seam test and costs 1.3-1.6x the untiled work.) Candidates step by 8 latent pixels
// (64 image pixels) down to 64 px; the overlap scales with the tile as in ComfyUI's own
// fallbacks (decode_tiled_: 16 of 64 latent pixels; encode_tiled_: 64 of 512 pixels).

namespace {

constexpr int64_t kTileStepPx = 64;  // candidate tiles are multiples of this (and the smallest)

std::vector<int64_t> tile_starts(int64_t size, int64_t tile, int64_t overlap) {
  if (size <= tile) return {0};
  std::vector<int64_t> p;
  for (int64_t i = 0; i < size - overlap; i += std::max<int64_t>(tile - overlap, 1))
    p.push_back(std::max<int64_t>(0, std::min(size - overlap, i)));
  return p;
}

// Distinct tile lengths along one axis.
std::set<int64_t> tile_lengths(int64_t size, int64_t tile, int64_t overlap) {
  std::set<int64_t> out;
  for (int64_t s : tile_starts(size, tile, overlap)) out.insert(std::min(tile, size - s));
  return out;
}

// Output pixels of `v` input pixels: v * num / den rounded as Python's round (half to even).
struct Scale {
  int64_t num = 1, den = 1;
  int64_t of(int64_t v) const { return int64_t(std::nearbyint(double(v * num) / double(den))); }
};

struct TileShape {
  int64_t h, w;
};

// The three tilings of a square tile t, in the order ComfyUI sums them, or the square one alone
// (one_pass, automatic tiling).
std::vector<TileShape> tilings_decode(int64_t t, bool one_pass) {
  if (one_pass) return {{t, t}};
  return {{2 * t, t / 2}, {t / 2, 2 * t}, {t, t}};
}
std::vector<TileShape> tilings_encode(int64_t t, bool one_pass) {
  if (one_pass) return {{t, t}};
  return {{t, t}, {t / 2, 2 * t}, {2 * t, t / 2}};
}

// Runs the model on one image or tile [1, C, h, w] (f32) and returns [1, C', h', w'] (f32).
using TileRun = std::function<Result<HostTensor>(const HostTensor&)>;

HostTensor crop(const HostTensor& x, int64_t y0, int64_t x0, int64_t h, int64_t w) {
  const Shape& s = x.shape();
  HostTensor part(DType::F32, Shape{s[0], s[1], h, w});
  for (int64_t p = 0; p < s[0] * s[1]; ++p)
    for (int64_t y = 0; y < h; ++y)
      std::memcpy(part.f32() + (p * h + y) * w, x.f32() + (p * s[2] + y0 + y) * s[3] + x0,
                  size_t(w) * sizeof(float));
  return part;
}

// The ramp of one axis of a tile of n output pixels.
std::vector<float> feather_ramp(int64_t n, int64_t feather) {
  std::vector<float> r(size_t(n), 1.0f);
  if (feather >= n) return r;
  for (int64_t t = 0; t < feather; ++t) {
    float a = float(double(t + 1) / double(feather));
    r[size_t(t)] *= a;
    r[size_t(n - 1 - t)] *= a;
  }
  return r;
}

// One tiling of one image x [1, C, H, W] that does not fit in one tile (Note [tiled scale]).
Result<HostTensor> tiling_run(const HostTensor& x, TileShape tile, int64_t overlap, Scale sc,
                              int64_t out_c, const TileRun& run,
                              const std::function<Status()>& before_tile) {
  const int64_t H = x.shape()[2], W = x.shape()[3];
  const int64_t OH = sc.of(H), OW = sc.of(W), feather = sc.of(overlap);
  HostTensor out(DType::F32, Shape{1, out_c, OH, OW});
  std::vector<float> wsum(size_t(OH * OW), 0.0f);
  for (int64_t ys : tile_starts(H, tile.h, overlap))
    for (int64_t xs : tile_starts(W, tile.w, overlap)) {
      const int64_t th = std::min(tile.h, H - ys), tw = std::min(tile.w, W - xs);
      if (before_tile) HR_TRY(before_tile());
      HR_ASSIGN_OR_RETURN(HostTensor y, run(crop(x, ys, xs, th, tw)));
      const int64_t ph = y.shape()[2], pw = y.shape()[3], oy = sc.of(ys), ox = sc.of(xs);
      if (y.shape()[1] != out_c || oy + ph > OH || ox + pw > OW)
        return make_error(ErrorCode::INTERNAL, "tile {} at ({}, {}) gave {}, outside {}x{}",
                          crop(x, ys, xs, th, tw).desc().str(), ys, xs, y.desc().str(), OH, OW);
      const std::vector<float> ry = feather_ramp(ph, feather), rx = feather_ramp(pw, feather);
      for (int64_t c = 0; c < out_c; ++c)
        for (int64_t yy = 0; yy < ph; ++yy)
          for (int64_t xx = 0; xx < pw; ++xx)
            out.f32()[(c * OH + oy + yy) * OW + ox + xx] +=
                y.f32()[(c * ph + yy) * pw + xx] * (ry[size_t(yy)] * rx[size_t(xx)]);
      for (int64_t yy = 0; yy < ph; ++yy)
        for (int64_t xx = 0; xx < pw; ++xx)
          wsum[size_t((oy + yy) * OW + ox + xx)] += ry[size_t(yy)] * rx[size_t(xx)];
    }
  const int64_t plane = OH * OW;
  for (int64_t c = 0; c < out_c; ++c)
    for (int64_t i = 0; i < plane; ++i) out.f32()[c * plane + i] /= wsum[size_t(i)];
  return out;
}

// The mean of the tilings of a batch, image by image; an image that one tiling holds whole is
// run whole (once) for that tiling.
Result<HostTensor> tiled_batch(const HostTensor& x_any, const std::vector<TileShape>& tilings,
                               int64_t overlap, Scale sc, int64_t out_c, const TileRun& run,
                               const std::function<Status()>& before_tile) {
  HostTensor x_f32;
  const HostTensor& x = x_any.dtype() == DType::F32 ? x_any : (x_f32 = x_any.to(DType::F32));
  const Shape& s = x.shape();
  const int64_t B = s[0], H = s[2], W = s[3], OH = sc.of(H), OW = sc.of(W);
  HostTensor out(DType::F32, Shape{B, out_c, OH, OW});
  const int64_t per_out = out_c * OH * OW;
  for (int64_t b = 0; b < B; ++b) {
    HostTensor img(DType::F32, Shape{1, s[1], H, W});
    std::memcpy(img.f32(), x.f32() + b * s[1] * H * W, img.bytes());
    HostTensor whole, sum;
    for (size_t k = 0; k < tilings.size(); ++k) {
      HostTensor part;
      if (H <= tilings[k].h && W <= tilings[k].w) {
        if (whole.empty()) {
          if (before_tile) HR_TRY(before_tile());
          HR_ASSIGN_OR_RETURN(whole, run(img));
        }
        part = whole.clone();
      } else {
        HR_ASSIGN_OR_RETURN(part,
                            tiling_run(img, tilings[k], overlap, sc, out_c, run, before_tile));
      }
      if (part.shape() != Shape{1, out_c, OH, OW})
        return make_error(ErrorCode::INTERNAL,
                          "tiled VAE: a tiling gave {}, expected [1, {}, {}, {}]",
                          part.desc().str(), out_c, OH, OW);
      if (k == 0) {
        sum = std::move(part);
      } else {
        for (int64_t i = 0; i < per_out; ++i) sum.f32()[i] += part.f32()[i];
      }
    }
    const float n = float(tilings.size());
    for (int64_t i = 0; i < per_out; ++i) out.f32()[b * per_out + i] = sum.f32()[i] / n;
  }
  return out;
}

}  // namespace

namespace {

std::string vae_name(const SDVAE& m) {
  std::string f = std::filesystem::path(m.path).filename().string();
  return f.empty() ? "the VAE" : "the VAE of " + f;
}

// Note [vae channels], with the VAE's file in the message.
Status vae_input_check(const SDVAE& m, const Shape& s, bool decode, const char* what) {
  return vae_input_check(m.config, s, decode, fmt::format("{} ({})", what, vae_name(m)));
}

// Encoder moments as one tensor [B, 2e, h, w] (mean, then logvar) so that tiles blend both.
Result<HostTensor> encode_joined(Executor& ex, SDVAE& m, const HostTensor& image) {
  HR_ASSIGN_OR_RETURN(VAEMoments mo, vae_encode(ex, m, image));
  const Shape& s = mo.mean.shape();
  HostTensor out(DType::F32, Shape{s[0], 2 * s[1], s[2], s[3]});
  const int64_t n = s[1] * s[2] * s[3];
  for (int64_t b = 0; b < s[0]; ++b) {
    std::memcpy(out.f32() + 2 * b * n, mo.mean.f32() + b * n, size_t(n) * sizeof(float));
    std::memcpy(out.f32() + (2 * b + 1) * n, mo.logvar.f32() + b * n, size_t(n) * sizeof(float));
  }
  return out;
}

VAEMoments moments_split(const HostTensor& joined) {
  const Shape& s = joined.shape();
  const int64_t e = s[1] / 2, n = e * s[2] * s[3];
  VAEMoments mo{HostTensor(DType::F32, Shape{s[0], e, s[2], s[3]}),
                HostTensor(DType::F32, Shape{s[0], e, s[2], s[3]})};
  for (int64_t b = 0; b < s[0]; ++b) {
    std::memcpy(mo.mean.f32() + b * n, joined.f32() + 2 * b * n, size_t(n) * sizeof(float));
    std::memcpy(mo.logvar.f32() + b * n, joined.f32() + (2 * b + 1) * n, size_t(n) * sizeof(float));
  }
  return mo;
}

// Runs `run` on each image of x and stacks the results.
Result<HostTensor> per_image_run(const HostTensor& x_any, const TileRun& run,
                                 const std::function<Status()>& before_tile) {
  HostTensor x_f32;
  const HostTensor& x = x_any.dtype() == DType::F32 ? x_any : (x_f32 = x_any.to(DType::F32));
  const Shape& s = x.shape();
  HostTensor out;
  for (int64_t b = 0; b < s[0]; ++b) {
    HostTensor img(DType::F32, Shape{1, s[1], s[2], s[3]});
    std::memcpy(img.f32(), x.f32() + b * img.numel(), img.bytes());
    if (b > 0 && before_tile) HR_TRY(before_tile());
    HR_ASSIGN_OR_RETURN(HostTensor y, run(img));
    if (out.empty()) {
      Shape os = y.shape();
      os[0] = s[0];
      out = HostTensor(DType::F32, os);
    }
    if (y.numel() * s[0] != out.numel())
      return make_error(ErrorCode::INTERNAL, "image {} gave {}, unlike image 0", b, y.desc().str());
    std::memcpy(out.f32() + b * y.numel(), y.f32(), y.bytes());
  }
  return out;
}

// Plans of the VAE graphs for one model and direction, memoised by shape.
class VAEPlanner {
 public:
  VAEPlanner(Executor& ex, const VAEConfig& cfg, DType dtype, bool decode)
      : ex_(ex), cfg_(cfg), dtype_(dtype), decode_(decode) {}

  Result<uint64_t> arena(int64_t b, int64_t h, int64_t w) {
    auto key = std::make_tuple(b, h, w);
    auto it = memo_.find(key);
    if (it != memo_.end()) return it->second;
    HR_ASSIGN_OR_RETURN(Graph g, decode_ ? vae_decode_graph(cfg_, b, h, w, dtype_)
                                         : vae_encode_graph(cfg_, b, h, w, dtype_));
    HR_ASSIGN_OR_RETURN(std::shared_ptr<const ArenaPlan> p, ex_.plan(g));
    memo_.emplace(key, p->arena_bytes);
    return p->arena_bytes;
  }

  // The least device room the VAE's weights need when they all may stream (a ring of staging
  // slots; residency_min_room), from the smallest graph: every tile reads the same weights.
  Result<uint64_t> min_stream_room() {
    const int64_t n = decode_ ? 1 : cfg_.downscale();
    HR_ASSIGN_OR_RETURN(Graph g, decode_ ? vae_decode_graph(cfg_, 1, n, n, dtype_)
                                         : vae_encode_graph(cfg_, 1, n, n, dtype_));
    HR_ASSIGN_OR_RETURN(std::shared_ptr<const CompiledGraph> c, ex_.compile(g));
    return residency_min_room(c->weights);
  }

  // The largest arena among the graphs that `tilings` would run on one H x W image.
  Result<uint64_t> tiled_arena(int64_t H, int64_t W, const std::vector<TileShape>& tilings,
                               int64_t overlap) {
    uint64_t most = 0;
    for (const TileShape& t : tilings) {
      if (H <= t.h && W <= t.w) {
        HR_ASSIGN_OR_RETURN(uint64_t a, arena(1, H, W));
        most = std::max(most, a);
        continue;
      }
      for (int64_t hl : tile_lengths(H, t.h, overlap))
        for (int64_t wl : tile_lengths(W, t.w, overlap)) {
          HR_ASSIGN_OR_RETURN(uint64_t a, arena(1, hl, wl));
          most = std::max(most, a);
        }
    }
    return most;
  }

 private:
  Executor& ex_;
  const VAEConfig& cfg_;
  DType dtype_;
  bool decode_;
  std::map<std::tuple<int64_t, int64_t, int64_t>, uint64_t> memo_;
};

// One decision within `room` (whole, per image, tiles from large to small); nullopt when not even
// the smallest tile fits, with `smallest` its arena.
Result<std::optional<VAEDecision>> vae_decide_within(VAEPlanner& planner, const VAEConfig& cfg,
                                                     const Shape& s, bool decode, uint64_t room,
                                                     uint64_t& smallest) {
  const char* what = decode ? "decode" : "encode";
  const int64_t down = cfg.downscale();
  const int64_t px = decode ? down : 1;  // image pixels per input pixel
  const int64_t step = std::max<int64_t>(1, kTileStepPx / px);
  const int64_t B = s[0], H = s[2], W = s[3];
  VAEDecision d;
  d.room = room;
  HR_ASSIGN_OR_RETURN(d.arena_bytes, planner.arena(B, H, W));
  const std::string arena_room =
      fmt::format("arena {} {} {} left", bytes_format(d.arena_bytes),
                  d.arena_bytes <= d.room ? "<=" : ">", bytes_format(d.room));
  if (d.arena_bytes <= d.room) {
    d.run_arena_bytes = d.arena_bytes;
    d.reason = fmt::format("VAE {} whole: {}", what, arena_room);
    return std::optional<VAEDecision>(d);
  }
  HR_ASSIGN_OR_RETURN(uint64_t one, planner.arena(1, H, W));
  if (B > 1 && one <= d.room) {
    d.mode = VAEMode::PER_IMAGE;
    d.run_arena_bytes = one;
    d.reason = fmt::format("VAE {} per image (batch {}): {}; one image {}", what, B, arena_room,
                           bytes_format(one));
    return std::optional<VAEDecision>(d);
  }
  // Encoder tiles must start and end on latent pixels (Scale is exact only then).
  const bool can_tile = decode || (H % down == 0 && W % down == 0);
  smallest = one;
  // Tiles of k * step for k = 1..K; the arena grows with the tile, so the largest that fits
  // is found by bisection (each probe plans a few graphs, which costs milliseconds).
  auto tiled = [&](int64_t k) -> Result<uint64_t> {
    const int64_t t = k * step;
    return planner.tiled_arena(H, W, decode ? tilings_decode(t, true) : tilings_encode(t, true),
                               decode ? t / 4 : t / 8);
  };
  const int64_t K = (std::max(H, W) - 1) / step;
  if (!can_tile || K < 1) return std::optional<VAEDecision>();
  HR_ASSIGN_OR_RETURN(smallest, tiled(1));
  if (smallest > d.room) return std::optional<VAEDecision>();
  int64_t lo = 1, hi = K;  // fits at lo
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo + 1) / 2;
    HR_ASSIGN_OR_RETURN(uint64_t a, tiled(mid));
    if (a <= d.room)
      lo = mid;
    else
      hi = mid - 1;
  }
  const int64_t t = lo * step, overlap = decode ? t / 4 : t / 8;
  HR_ASSIGN_OR_RETURN(uint64_t a, tiled(lo));
  d.mode = VAEMode::TILED;
  d.tile_px = t * px;
  d.overlap_px = overlap * px;
  d.rows = int64_t(tile_starts(H, t, overlap).size());
  d.cols = int64_t(tile_starts(W, t, overlap).size());
  d.run_arena_bytes = a;
  d.reason = fmt::format("VAE {} tiled {}x{} at {} px: {}; tile arena {}", what, d.rows, d.cols,
                         d.tile_px, arena_room, bytes_format(a));
  return std::optional<VAEDecision>(d);
}

// Note [VAE auto tiling]. `s` is the latent (decode) or image (encode) shape; `room` the arena
// room with the VAE's weights resident, `room_all` with them given back too (then they stream,
// Note [streamed execution] in stream_copies.cpp); `name` names the VAE in the error. Resident
// weights are tried first; streaming them is the fallback when not even the smallest tile fits.
Result<VAEDecision> vae_decide_in(Executor& ex, const VAEConfig& cfg, DType dtype, const Shape& s,
                                  bool decode, uint64_t room, uint64_t room_all,
                                  const std::string& name) {
  const char* what = decode ? "decode" : "encode";
  HR_TRY(vae_input_check(cfg, s, decode, fmt::format("vae_{}_decide ({})", what, name)));
  VAEPlanner planner(ex, cfg, dtype, decode);
  uint64_t smallest = 0;
  HR_ASSIGN_OR_RETURN(std::optional<VAEDecision> d,
                      vae_decide_within(planner, cfg, s, decode, room, smallest));
  if (d) return *d;
  HR_ASSIGN_OR_RETURN(uint64_t ring, planner.min_stream_room());
  if (room_all != UINT64_MAX && room_all > room + ring) {
    const uint64_t streamed_room = room_all - ring;
    uint64_t unused = 0;
    HR_ASSIGN_OR_RETURN(d, vae_decide_within(planner, cfg, s, decode, streamed_room, unused));
    if (d) {
      d->weights_stream = true;
      d->reason += fmt::format(" (weights streamed: {} for the arena, {} for the staging ring)",
                               bytes_format(streamed_room), bytes_format(ring));
      return *d;
    }
  }
  const int64_t px = decode ? cfg.downscale() : 1;
  const int64_t step = std::max<int64_t>(1, kTileStepPx / px);
  HR_ASSIGN_OR_RETURN(uint64_t whole, planner.arena(s[0], s[2], s[3]));
  Status st = make_error(ErrorCode::OUT_OF_MEMORY,
                         "VAE {} of {}x{} px (batch {}) by {}: arena {} > {} left, and the "
                         "smallest tile ({} px) needs {}",
                         what, s[2] * px, s[3] * px, s[0], name, bytes_format(whole),
                         bytes_format(room), std::min(std::max(s[2], s[3]), step) * px,
                         bytes_format(smallest));
  st.set_segments(ex.allocator().segments(smallest));
  return st;
}

// Weights are uploaded (counted, on the CPU) on first use, inside the run and after its arena
// was allocated; uploading them before deciding makes arena_room count them.
Status vae_weights_upload(Executor& ex, SDVAE& model, bool decode) {
  const int64_t n = decode ? 1 : model.config.downscale();
  HR_ASSIGN_OR_RETURN(Graph g, decode ? vae_decode_graph(model.config, 1, n, n, model.dtype)
                                      : vae_encode_graph(model.config, 1, n, n, model.dtype));
  HR_ASSIGN_OR_RETURN(std::shared_ptr<const CompiledGraph> c, ex.compile(g));
  model.store.bind(&ex.backend(), &ex.allocator());
  // Weights that cannot all be resident are not uploaded: the decision then counts on
  // streaming them (vae_decide_in's fallback).
  if (c->weight_bytes - std::min(c->weight_bytes, model.store.device_bytes()) >
      ex.arena_room(&model.store))
    return Status();
  for (const Value& v : c->graph.values())
    if (v.kind == ValueKind::WEIGHT) {
      Result<TensorRef> r = model.store.weight_get(v.name, v.desc, v.layout);
      if (!r.ok()) return r.status().with_context("uploading the VAE weights");
    }
  return Status();
}

}  // namespace

Result<HostTensor> vae_decode_tiled(Executor& ex, SDVAE& model, const HostTensor& latent,
                                    const VAETileOptions& tiles) {
  HR_TRY(vae_input_check(model, latent.shape(), true, "vae_decode_tiled"));
  const int64_t down = model.config.downscale();
  const int64_t tile = tiles.tile_px / down, overlap = tiles.overlap_px / down;
  if (tile / 2 < 1 || overlap < 0 || overlap >= tile / 2)
    return make_error(ErrorCode::INVALID_ARGUMENT,
                      "vae_decode_tiled: tile {} px, overlap {} px: need a tile of at least {} px "
                      "and an overlap under half of it",
                      tiles.tile_px, tiles.overlap_px, 2 * down);
  TileRun run = [&](const HostTensor& t) { return vae_decode(ex, model, t); };
  return tiled_batch(latent, tilings_decode(tile, tiles.one_pass), overlap, Scale{down, 1},
                     model.config.out_channels,
                     run, tiles.before_tile);
}

Result<VAEMoments> vae_encode_tiled(Executor& ex, SDVAE& model, const HostTensor& image,
                                    const VAETileOptions& tiles) {
  HR_TRY(vae_input_check(model, image.shape(), false, "vae_encode_tiled"));
  const int64_t down = model.config.downscale(), t = tiles.tile_px, overlap = tiles.overlap_px;
  const Shape& s = image.shape();
  if (s[2] % down || s[3] % down || t < 2 * down || (t / 2) % down || overlap < 0 ||
      overlap % down || overlap >= t / 2)
    return make_error(
        ErrorCode::INVALID_ARGUMENT,
        "vae_encode_tiled: image {}x{}, tile {} px, overlap {} px: sides, half the "
        "tile and the overlap must be multiples of {}, the overlap under half the tile",
        s[3], s[2], t, overlap, down);
  TileRun run = [&](const HostTensor& x) { return encode_joined(ex, model, x); };
  HR_ASSIGN_OR_RETURN(HostTensor joined,
                      tiled_batch(image, tilings_encode(t, tiles.one_pass), overlap, Scale{1, down},
                                  2 * int64_t(model.config.embed_dim), run, tiles.before_tile));
  return moments_split(joined);
}

Result<VAEDecision> vae_decode_decide(Executor& ex, SDVAE& model, const Shape& latent_shape) {
  // Idle models give room.
  return vae_decide_in(ex, model.config, model.dtype, latent_shape, true,
                       ex.arena_room(&model.store), ex.arena_room(), vae_name(model));
}

Result<VAEDecision> vae_encode_decide(Executor& ex, SDVAE& model, const Shape& image_shape) {
  return vae_decide_in(ex, model.config, model.dtype, image_shape, false,
                       ex.arena_room(&model.store), ex.arena_room(), vae_name(model));
}

Result<VAEDecision> vae_decide_for(Executor& ex, const VAEConfig& cfg, DType dtype,
                                   const Shape& shape, bool decode, uint64_t room,
                                   uint64_t room_all) {
  return vae_decide_in(ex, cfg, dtype, shape, decode, room, room_all, "the VAE");
}

Result<VAEDecoded> vae_decode_auto(Executor& ex, SDVAE& model, const HostTensor& latent,
                                   const std::function<Status()>& before_tile) {
  HR_TRY(vae_input_check(model, latent.shape(), true, "vae_decode_auto"));
  HR_TRY(vae_weights_upload(ex, model, true));
  VAEDecoded r;
  HR_ASSIGN_OR_RETURN(r.decision, vae_decode_decide(ex, model, latent.shape()));
  const VAEDecision& d = r.decision;
  TileRun run = [&](const HostTensor& t) { return vae_decode(ex, model, t); };
  if (d.mode == VAEMode::WHOLE) {
    HR_ASSIGN_OR_RETURN(r.image, vae_decode(ex, model, latent));
  } else if (d.mode == VAEMode::PER_IMAGE) {
    HR_ASSIGN_OR_RETURN(r.image, per_image_run(latent, run, before_tile));
  } else {
    HR_ASSIGN_OR_RETURN(
        r.image,
        vae_decode_tiled(ex, model, latent, VAETileOptions{d.tile_px, d.overlap_px, before_tile, true}));
  }
  return r;
}

Result<VAEEncoded> vae_encode_auto(Executor& ex, SDVAE& model, const HostTensor& image,
                                   const std::function<Status()>& before_tile) {
  HR_TRY(vae_input_check(model, image.shape(), false, "vae_encode_auto"));
  HR_TRY(vae_weights_upload(ex, model, false));
  VAEEncoded r;
  HR_ASSIGN_OR_RETURN(r.decision, vae_encode_decide(ex, model, image.shape()));
  const VAEDecision& d = r.decision;
  if (d.mode == VAEMode::WHOLE) {
    HR_ASSIGN_OR_RETURN(r.moments, vae_encode(ex, model, image));
  } else if (d.mode == VAEMode::PER_IMAGE) {
    TileRun run = [&](const HostTensor& x) { return encode_joined(ex, model, x); };
    HR_ASSIGN_OR_RETURN(HostTensor joined, per_image_run(image, run, before_tile));
    r.moments = moments_split(joined);
  } else {
    HR_ASSIGN_OR_RETURN(
        r.moments,
        vae_encode_tiled(ex, model, image, VAETileOptions{d.tile_px, d.overlap_px, before_tile, true}));
  }
  return r;
}

}  // namespace hr
