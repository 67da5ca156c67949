// Token id rows as a text encoder graph's "ids" input: one I64 [B, L] tensor, checked.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"

namespace hr {

// rows (B rows of L ids each) -> I64 [B, L]. INVALID_ARGUMENT, prefixed by `what` (the encoder's
// name), when there are no tokens, rows differ in length, or an id is outside [0, vocab).
Result<HostTensor> token_rows_tensor(const std::vector<std::vector<int32_t>>& rows, int64_t vocab,
                                     std::string_view what);

}  // namespace hr
