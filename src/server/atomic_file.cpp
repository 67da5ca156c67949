// file_write_atomic with fsync before the rename.
#include "server/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace hr {

Status file_write_atomic(const std::filesystem::path& path, const std::string& data) {
  const std::string tmp = path.string() + ".tmp-" + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return make_error(ErrorCode::IO, "cannot create {}: {}", tmp, std::strerror(errno));
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      return make_error(ErrorCode::IO, "cannot write {}: {}", tmp, std::strerror(err));
    }
    done += size_t(n);
  }
  const bool synced = ::fsync(fd) == 0;
  ::close(fd);
  if (!synced || std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return make_error(ErrorCode::IO, "cannot write {}: {}", path.string(), std::strerror(err));
  }
  return Status();
}

}  // namespace hr
