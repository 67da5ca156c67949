// Graph passes: rewrites of a built graph into an equivalent one that runs faster on a given
// backend. The executor applies them before planning, so the arena plan is made for exactly
// the graph that runs (Note [graph passes]).
#pragma once

#include "backend/kernels.h"
#include "core/status.h"
#include "graph/graph.h"

namespace hr {

// Note [graph passes]
// Models build graphs in the layouts of their checkpoints (images NCHW) with one op per step
// of the reference implementation. Passes then rewrite the graph for the backend:
//
// 1. pass_channels_last (when BackendKernels::prefers_channels_last for a convolution's dtype):
//    images around convolutions become NHWC. Convolutions read their filters as OHWI (weights
//    are bound in that layout, Note [weight layouts] in graph.h); group norms, upsampling,
//    element-wise ops, concatenation and slicing follow whichever layout their inputs have; a
//    per-channel term [N, C, 1, 1] becomes [N, 1, 1, C] (a view); the image <-> token
//    rearrangement `reshape [N,C,H,W]->[N,C,HW]; permute (0,2,1)` becomes a plain reshape
//    [N,H,W,C]->[N,HW,C] (and its inverse likewise). Any other consumer of an NHWC image gets
//    an NCHW copy (a PERMUTE), as do the graph's outputs, so the result is always the graph's.
// 2. pass_fuse: GROUP_NORM followed by SILU becomes one GROUP_NORM with fuse_silu; LINEAR or
//    CONV2D whose only reader is an ADD becomes one op with add_input (the ADD's other operand
//    is added in the op's epilogue: a residual, or a per-channel embedding for convolutions),
//    also when a RESHAPE view sits between the LINEAR and the ADD. The fused op is emitted where
//    the ADD was, so every input it reads is already computed.
// 3. pass_stack_projections (when BackendKernels::prefers_stacked_weights): the key/value
//    projections of attentions that read one shared input (a UNet's text context) become one
//    GEMM per stack of layers, each attention reading its column windows of the result (Note
//    [stacked context projections] in pass_stack.cpp).
// 0. pass_fp8_linear (when BackendKernels::runs_fp8_gemm and the graph has `_fast` fp8
//    weights), first, while the graph still has its storage map: their linear layers become
//    fp8 GEMMs (Note [fp8 linear] in pass_fp8.cpp).
// Inputs keep their names and the outputs their names and order, so callers bind and read the
// rewritten graph exactly like the one they built.
struct PassOptions {
  bool channels_last = false;
  bool fuse = true;
  bool stack = false;      // pass_stack_projections
  bool stack_qkv = false;  // and its self-attention mode (implies stack; pass_options turns it
                           // on wherever stack is, unless HEADROOM_STACK_QKV=0)
  bool fp8_linear = false;  // pass_fp8_linear, first
};

// The passes `kernels` benefit from for g.
PassOptions pass_options(const Graph& g, const BackendKernels& kernels);
// g after the passes of pass_options(g, kernels).
Result<Graph> graph_passes(const Graph& g, const BackendKernels& kernels);
// g after exactly these passes; with `kernels`, channels-last converts only the convolutions
// whose dtype they prefer channels-last (null: every convolution).
Result<Graph> graph_passes(const Graph& g, const PassOptions& options,
                           const BackendKernels* kernels = nullptr);

// The single passes. `kernels` null in pass_channels_last converts every convolution.
Result<Graph> pass_channels_last(const Graph& g, const BackendKernels* kernels);
Result<Graph> pass_fuse(const Graph& g);
Result<Graph> pass_fp8_linear(const Graph& g);
Result<Graph> pass_stack_projections(const Graph& g, bool self_attention = false);

}  // namespace hr
