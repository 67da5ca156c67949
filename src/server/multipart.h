// multipart/form-data bodies (POST /upload/image): the parts with their field name, file name
// and bytes.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"

namespace hr {

struct MultipartPart {
  std::string name;      // the form field
  std::string filename;  // empty for plain fields
  std::string content_type;
  std::string data;
};

// INVALID_ARGUMENT when the content type has no boundary or the body is not well formed.
Result<std::vector<MultipartPart>> multipart_parse(const std::string& content_type,
                                                   const std::string& body);

// The first part named `name`, or nullptr.
const MultipartPart* multipart_find(const std::vector<MultipartPart>& parts,
                                    const std::string& name);

}  // namespace hr
