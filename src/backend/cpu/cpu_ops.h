// CPU kernels, one op (or op family) per .cpp file. All take f32 for compute ops (other float
// dtypes return UNSUPPORTED); data-movement ops take any dtype. Threads come from OpenMP
// (omp_set_num_threads is set by the backend) and OpenBLAS for GEMM.
#pragma once

#include "backend/backend.h"

namespace hr::cpu {

Status linear(const OpCall& c);              // cpu_linear.cpp (OpenBLAS sgemm)
Status linear_fp8(const OpCall& c);          // cpu_linear_fp8.cpp (widened to f32, sgemm)
Status matmul(const OpCall& c);              // cpu_matmul.cpp
Status conv2d(const OpCall& c);              // cpu_conv2d.cpp (im2col + sgemm)
size_t conv2d_workspace(const OpParams& p, std::span<const TensorDesc> in, const TensorDesc& out);
Status group_norm(const OpCall& c);          // cpu_norm.cpp
Status layer_norm(const OpCall& c);          // cpu_norm.cpp
Status softmax(const OpCall& c);             // cpu_softmax.cpp
Status attention(const OpCall& c);           // cpu_attention.cpp (query-chunked)
size_t attention_workspace(const OpParams& p, std::span<const TensorDesc> in, const TensorDesc& out);
Status unary(const OpCall& c);               // cpu_unary.cpp: gelu, gelu_tanh, quick_gelu, silu, scale
Status geglu(const OpCall& c);               // cpu_unary.cpp
Status binary(const OpCall& c);              // cpu_binary.cpp: add, sub, mul, div with broadcasting
Status concat(const OpCall& c);              // cpu_layout.cpp
Status slice(const OpCall& c);               // cpu_layout.cpp
Status permute(const OpCall& c);             // cpu_layout.cpp
Status upsample_nearest(const OpCall& c);    // cpu_layout.cpp
Status embedding(const OpCall& c);           // cpu_embedding.cpp
Status timestep_embedding(const OpCall& c);  // cpu_embedding.cpp
Status cast(const OpCall& c);                // cpu_layout.cpp (also RESHAPE/COPY as memcpy)
Status rms_norm(const OpCall& c);            // cpu_rms_norm.cpp
Status rope(const OpCall& c);                // cpu_rope.cpp
Status qkv_rope(const OpCall& c);            // cpu_qkv_rope.cpp

// cpu_variants.cpp: channels-last and add_input forms, built from the kernels above.
Status conv2d_variant(const OpCall& c);
size_t conv2d_variant_workspace(const OpParams& p, std::span<const TensorDesc> in, const TensorDesc& out);
Status linear_variant(const OpCall& c);
Status group_norm_variant(const OpCall& c);
size_t group_norm_variant_workspace(const OpParams& p, std::span<const TensorDesc> in, const TensorDesc& out);
Status upsample_variant(const OpCall& c);

}  // namespace hr::cpu
