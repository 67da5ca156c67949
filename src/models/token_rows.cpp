// Token id rows checked and packed into an encoder's "ids" input.
#include "models/token_rows.h"

namespace hr {

Result<HostTensor> token_rows_tensor(const std::vector<std::vector<int32_t>>& rows, int64_t vocab,
                                     std::string_view what) {
  if (rows.empty() || rows[0].empty())
    return make_error(ErrorCode::INVALID_ARGUMENT, "{}: no tokens", what);
  const int64_t B = int64_t(rows.size()), L = int64_t(rows[0].size());
  HostTensor ids(DType::I64, {B, L});
  auto* p = static_cast<int64_t*>(ids.data());
  for (int64_t b = 0; b < B; ++b) {
    const std::vector<int32_t>& row = rows[size_t(b)];
    if (int64_t(row.size()) != L)
      return make_error(ErrorCode::INVALID_ARGUMENT, "{}: token row {} has {} ids, row 0 has {}",
                        what, b, row.size(), L);
    for (int64_t j = 0; j < L; ++j) {
      const int32_t id = row[size_t(j)];
      if (id < 0 || id >= vocab)
        return make_error(ErrorCode::INVALID_ARGUMENT,
                          "{}: token id {} (row {}, position {}) is outside the {}-entry "
                          "vocabulary",
                          what, id, b, j, vocab);
      p[b * L + j] = id;
    }
  }
  return ids;
}

}  // namespace hr
