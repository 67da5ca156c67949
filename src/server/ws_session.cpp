// WsSession: Beast websocket stream; reads (and ignores) client frames, writes queued frames
// one at a time on the connection's strand.
#include "server/ws_session.h"

#include <atomic>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/websocket.hpp>
#include <deque>
#include <memory>

#include "jobs/job.h"
#include "jobs/job_messages.h"
#include "server/ws_hub.h"

namespace hr {
namespace {

namespace beast = boost::beast;
namespace websocket = beast::websocket;
namespace net = boost::asio;
using tcp = net::ip::tcp;

// Client frames are not used; anything larger is garbage and closes the connection.
constexpr size_t kMaxClientFrame = 64 * 1024;

class WsSession final : public WsClient, public std::enable_shared_from_this<WsSession> {
 public:
  WsSession(tcp::socket&& socket, WsHub& hub, WsSessionOptions options)
      : ws_(std::move(socket)), hub_(hub), opt_(std::move(options)) {}

  void run(beast::http::request<beast::http::string_body> req) {
    ws_.set_option(websocket::stream_base::timeout::suggested(beast::role_type::server));
    ws_.read_message_max(kMaxClientFrame);
    ws_.async_accept(req, beast::bind_front_handler(&WsSession::on_accept, shared_from_this()));
  }

  bool send(std::shared_ptr<const std::string> frame, bool binary) override {
    if (closed_.load()) return true;
    if (queued_.fetch_add(1) >= opt_.queue_frames) {
      queued_.fetch_sub(1);
      drop();
      return false;
    }
    net::post(ws_.get_executor(), [self = shared_from_this(), frame = std::move(frame), binary] {
      self->out_.push_back({frame, binary});
      if (self->out_.size() == 1) self->write_next();
    });
    return true;
  }

 private:
  struct Frame {
    std::shared_ptr<const std::string> data;
    bool binary;
  };

  void on_accept(beast::error_code ec) {
    if (ec) return;
    // `status` with the sid first, then broadcasts: a client's first message is always status.
    Json status = msg_status(opt_.queue_remaining ? opt_.queue_remaining() : 0);
    status["sid"] = opt_.client_id;
    send(std::make_shared<const std::string>(Json{{"type", "status"}, {"data", status}}.dump()),
         false);
    hub_.join(opt_.client_id, shared_from_this());
    read_next();
  }

  void read_next() {
    ws_.async_read(in_, beast::bind_front_handler(&WsSession::on_read, shared_from_this()));
  }

  void on_read(beast::error_code ec, size_t) {
    if (ec) return end();
    in_.consume(in_.size());
    read_next();
  }

  void write_next() {
    if (closed_) return;
    ws_.binary(out_.front().binary);
    ws_.async_write(net::buffer(*out_.front().data),
                    beast::bind_front_handler(&WsSession::on_write, shared_from_this()));
  }

  void on_write(beast::error_code ec, size_t) {
    if (ec) return end();
    out_.pop_front();
    queued_.fetch_sub(1);
    if (!out_.empty()) write_next();
  }

  // The hub already removed a dropped client; closing the socket ends the pending operations.
  void drop() {
    if (closed_.exchange(true)) return;
    net::post(ws_.get_executor(), [self = shared_from_this()] {
      beast::error_code ec;
      beast::get_lowest_layer(self->ws_).socket().close(ec);
    });
  }

  void end() {
    closed_ = true;
    hub_.leave(this);
    beast::error_code ec;
    beast::get_lowest_layer(ws_).socket().close(ec);
  }

  websocket::stream<beast::tcp_stream> ws_;
  WsHub& hub_;
  WsSessionOptions opt_;
  beast::flat_buffer in_;
  std::deque<Frame> out_;  // strand only
  std::atomic<size_t> queued_{0};
  std::atomic<bool> closed_{false};
};

}  // namespace

void ws_session_run(tcp::socket socket, beast::http::request<beast::http::string_body> request,
                    WsHub& hub, WsSessionOptions options) {
  if (options.client_id.empty()) options.client_id = prompt_id_new();
  auto s = std::make_shared<WsSession>(std::move(socket), hub, std::move(options));
  s->run(std::move(request));
}

}  // namespace hr
