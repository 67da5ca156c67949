// multipart_parse: boundary delimited parts, each with headers and data (RFC 7578).
#include "server/multipart.h"

#include <algorithm>
#include <cctype>

namespace hr {
namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return char(std::tolower(c)); });
  return s;
}

// The value of `key=` in a header's parameters ("form-data; name=\"image\"; filename=\"a.png\"").
std::string header_param(const std::string& header, const std::string& key) {
  const std::string l = lower(header);
  size_t pos = 0;
  while ((pos = l.find(key + "=", pos)) != std::string::npos) {
    if (pos == 0 || l[pos - 1] == ' ' || l[pos - 1] == ';') break;
    pos += key.size();
  }
  if (pos == std::string::npos) return "";
  pos += key.size() + 1;
  if (pos < header.size() && header[pos] == '"') {
    const size_t end = header.find('"', pos + 1);
    return header.substr(pos + 1, end == std::string::npos ? std::string::npos : end - pos - 1);
  }
  const size_t end = header.find(';', pos);
  std::string v = header.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
  while (!v.empty() && v.back() == ' ') v.pop_back();
  return v;
}

Result<MultipartPart> part_parse(const std::string& raw) {
  const size_t split = raw.find("\r\n\r\n");
  if (split == std::string::npos)
    return make_error(ErrorCode::INVALID_ARGUMENT, "multipart part without headers");
  MultipartPart p;
  size_t start = 0;
  const std::string headers = raw.substr(0, split);
  while (start < headers.size()) {
    size_t end = headers.find("\r\n", start);
    if (end == std::string::npos) end = headers.size();
    const std::string line = headers.substr(start, end - start);
    const size_t colon = line.find(':');
    if (colon != std::string::npos) {
      const std::string name = lower(line.substr(0, colon));
      std::string value = line.substr(colon + 1);
      while (!value.empty() && value.front() == ' ') value.erase(value.begin());
      if (name == "content-disposition") {
        p.name = header_param(value, "name");
        p.filename = header_param(value, "filename");
      } else if (name == "content-type") {
        p.content_type = value;
      }
    }
    start = end + 2;
  }
  p.data = raw.substr(split + 4);
  return p;
}

}  // namespace

Result<std::vector<MultipartPart>> multipart_parse(const std::string& content_type,
                                                   const std::string& body) {
  if (lower(content_type).rfind("multipart/form-data", 0) != 0)
    return make_error(ErrorCode::INVALID_ARGUMENT, "expected multipart/form-data, got '{}'",
                      content_type);
  const std::string boundary = header_param(content_type, "boundary");
  if (boundary.empty())
    return make_error(ErrorCode::INVALID_ARGUMENT, "multipart body without a boundary");
  const std::string delim = "--" + boundary;
  size_t pos = body.find(delim);
  if (pos == std::string::npos)
    return make_error(ErrorCode::INVALID_ARGUMENT, "multipart boundary not found");
  std::vector<MultipartPart> parts;
  while (true) {
    pos += delim.size();
    if (body.compare(pos, 2, "--") == 0) return parts;  // the closing delimiter
    if (body.compare(pos, 2, "\r\n") != 0)
      return make_error(ErrorCode::INVALID_ARGUMENT, "malformed multipart delimiter");
    pos += 2;
    const size_t next = body.find("\r\n" + delim, pos);
    if (next == std::string::npos)
      return make_error(ErrorCode::INVALID_ARGUMENT, "unterminated multipart body");
    HR_ASSIGN_OR_RETURN(MultipartPart part, part_parse(body.substr(pos, next - pos)));
    parts.push_back(std::move(part));
    pos = next + 2;
  }
}

const MultipartPart* multipart_find(const std::vector<MultipartPart>& parts,
                                    const std::string& name) {
  for (const MultipartPart& p : parts)
    if (p.name == name) return &p;
  return nullptr;
}

}  // namespace hr
