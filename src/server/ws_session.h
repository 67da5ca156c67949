// One WebSocket connection (/ws?clientId=): joins the hub, gets `status` with its sid, then
// receives queued frames in order (Note [bounded send queues] in server/ws_hub.h).
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>
#include <functional>
#include <string>

namespace hr {

class WsHub;

struct WsSessionOptions {
  std::string client_id;  // from ?clientId=, else a fresh id
  size_t queue_frames = 1024;
  std::function<size_t()> queue_remaining;  // for the first `status` message
};

// Takes over `socket` (its executor must be a strand) and answers the upgrade `request`.
void ws_session_run(boost::asio::ip::tcp::socket socket,
                    boost::beast::http::request<boost::beast::http::string_body> request,
                    WsHub& hub, WsSessionOptions options);

}  // namespace hr
