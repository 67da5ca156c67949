// BackendKernels: the op kernels of a backend (support, workspaces, layout preferences, running
// one op on a stream). The ops themselves are defined once in op.h (Note [op semantics]).
#pragma once

#include <cstddef>
#include <span>

#include "backend/op.h"
#include "backend/stream.h"
#include "core/status.h"
#include "core/tensor.h"

namespace hr {

// One op invocation. Inputs and output point at memory of this backend.
struct OpCall {
  OpKind kind = OpKind::COPY;
  const OpParams* params = nullptr;
  std::span<const TensorRef> inputs;
  TensorRef output;
  void* workspace = nullptr;  // op_workspace() bytes, or null when that is 0
  size_t workspace_bytes = 0;
};

class BackendKernels {
 public:
  // Whether op_run handles `kind` for inputs of this dtype.
  virtual bool op_supported(OpKind kind, DType dtype) const = 0;
  // The dtype `--dtype auto` computes in (Note [device properties] in device.h).
  virtual DType compute_dtype_default() const { return DType::F32; }
  // Whether convolutions of this dtype run faster channels-last (graph passes then lay images
  // out NHWC, Note [graph passes] in graph/passes.h). Every backend runs both layouts.
  virtual bool prefers_channels_last(DType) const { return false; }
  // Whether graph passes stack the projections of one input into one GEMM over a stacked weight
  // (Note [stacked context projections] in graph/pass_stack.cpp). Every backend runs both.
  virtual bool prefers_stacked_weights() const { return false; }
  // Whether LINEAR_FP8 runs on fp8 tensor cores here (graph passes then run the linear layers of
  // `_fast` fp8 weights as fp8 GEMMs, Note [fp8 linear] in graph/pass_fp8.cpp).
  virtual bool runs_fp8_gemm() const { return false; }
  // Scratch bytes op_run needs for this call (counted in the plan).
  virtual size_t op_workspace(OpKind kind, const OpParams& params,
                              std::span<const TensorDesc> inputs,
                              const TensorDesc& output) const = 0;
  // Runs one op. Shapes have been checked by op_infer; the backend checks what only it can
  // (e.g. embedding ids in range) and reports UNSUPPORTED for dtypes it lacks.
  virtual Status op_run(const OpCall& call, Stream* s) = 0;

 protected:
  BackendKernels() = default;
  ~BackendKernels() = default;  // owned as a Backend, borrowed as BackendKernels
  BackendKernels(const BackendKernels&) = delete;
  BackendKernels& operator=(const BackendKernels&) = delete;
};

}  // namespace hr
