// The TCP listener and HTTP/1.1 sessions on Boost.Beast: reads requests within body and time
// limits, hands WebSocket upgrades of /ws to server/ws_session.h and everything else to the
// Router, on a small pool of I/O threads.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "core/status.h"
#include "server/router.h"
#include "server/server_config.h"

namespace hr {

class WsHub;

class HttpListener {
 public:
  HttpListener(const ServerConfig& config, const Router& router, WsHub& hub,
               std::function<size_t()> queue_remaining);
  HttpListener(const HttpListener&) = delete;
  HttpListener& operator=(const HttpListener&) = delete;
  ~HttpListener();

  // Binds config.listen:config.port and starts the I/O threads; IO naming the address when it
  // cannot bind.
  Status start();
  uint16_t port() const;  // the bound port (config.port, or the one chosen for 0)
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace hr
