// The tensor rules of ComfyUI's latent nodes (nodes.py, comfy_extras/nodes_latent.py,
// nodes_mask.py at a125cd84) on F32 [B, C, H, W] latents: Python slicing, batch repetition,
// broadcasting, composites, flips and rotations. Errors where torch would raise.
#pragma once

#include <functional>

#include "core/status.h"
#include "core/tensor.h"

namespace hr {

// A Python slice x[start:stop] of a dimension of length len (negative indices count from the
// end, bounds clamp): the half-open range [begin, end) it selects.
struct PySlice {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};
PySlice py_slice(int64_t start, int64_t stop, int64_t len);
// Python's floor division (x // d), d > 0.
int64_t py_floor_div(int64_t x, int64_t d);

// x[:, :, rows, cols].
HostTensor latent_rect(const HostTensor& x, PySlice rows, PySlice cols);
// x[begin:begin + n] along the batch is tensor_rows0 (models/conditioning.h).
// torch.cat((a, b), 0); shapes past the batch must agree.
Result<HostTensor> latent_batch_concat(const HostTensor& a, const HostTensor& b);
// x.repeat(n, 1, 1, 1).
HostTensor latent_batch_repeat(const HostTensor& x, int64_t n);
// comfy.utils.repeat_to_batch_size: truncate or tile to `batch`.
HostTensor latent_repeat_to_batch(const HostTensor& x, int64_t batch);

// torch.flip over dim 2 (rows) or 3 (columns).
HostTensor latent_flip(const HostTensor& x, int dim);
// torch.rot90(x, k, dims=[3, 2]) for k in 0..3.
HostTensor latent_rot90(const HostTensor& x, int k);

// a op b elementwise with torch broadcasting (each dim equal, or 1 on one side).
Result<HostTensor> latent_broadcast(const HostTensor& a, const HostTensor& b,
                                    const std::function<float(float, float)>& op);

// comfy_extras/nodes_latent.py reshape_latent_to: a bilinear centre-cropped resize to the
// target's H x W when anything past the batch differs, then repeat_to_batch_size when asked.
Result<HostTensor> latent_reshape_to(const Shape& target, const HostTensor& latent,
                                     bool repeat_batch);

// nodes.py LatentComposite.composite: `from` pasted into `to` at latent (x, y) with ComfyUI's
// linear feather ramp of `feather` latent pixels on the sides not touching the border.
Result<HostTensor> latent_composite(const HostTensor& to, const HostTensor& from, int64_t x,
                                    int64_t y, int64_t feather);

// nodes_mask.py composite (multiplier 8): `source` (resized to the destination when
// resize_source) over `dest` at pixel (x, y), weighted by `mask` ([Bm, H, W] or [H, W],
// bilinear to the source size; null: ones).
Result<HostTensor> latent_composite_masked(const HostTensor& dest, const HostTensor& source,
                                           int64_t x, int64_t y, const HostTensor* mask,
                                           bool resize_source);

}  // namespace hr
