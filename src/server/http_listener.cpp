// HttpListener: acceptor loop and one HttpSession per connection, each on its own strand.
#include "server/http_listener.h"

#include <algorithm>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>
#include <chrono>
#include <cstdint>
#include <optional>
#include <thread>
#include <vector>

#include "core/signal_stack.h"
#include "server/ws_hub.h"
#include "server/ws_session.h"

namespace hr {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
namespace net = boost::asio;
using tcp = net::ip::tcp;

constexpr size_t kHeaderLimit = 16 * 1024;
// A request (headers and body) must arrive within this; slow clients are disconnected.
constexpr std::chrono::seconds kReadTimeout{30};

struct SessionEnv {
  const ServerConfig& config;
  const Router& router;
  WsHub& hub;
  std::function<size_t()> queue_remaining;
};

bool is_upload(const std::string& path) {
  const std::string p = route_path_strip_api(path);
  return p.rfind("/upload/", 0) == 0;
}

class HttpSession : public std::enable_shared_from_this<HttpSession> {
 public:
  HttpSession(tcp::socket&& socket, const SessionEnv& env)
      : stream_(std::move(socket)), env_(env) {}

  void run() {
    net::dispatch(stream_.get_executor(),
                  beast::bind_front_handler(&HttpSession::read_header, shared_from_this()));
  }

 private:
  void read_header() {
    parser_.emplace();
    parser_->header_limit(kHeaderLimit);
    parser_->body_limit(std::max(env_.config.max_body_bytes, env_.config.max_upload_bytes));
    stream_.expires_after(kReadTimeout);
    http::async_read_header(stream_, buffer_, *parser_,
                            beast::bind_front_handler(&HttpSession::on_header, shared_from_this()));
  }

  // Note [body limit per route]: the limit depends on the route, known once the header is read,
  // but Beast checks a Content-Length against the limit set before the header: so the header is
  // read under the larger of the two limits, and the route's limit is checked here (Content-
  // Length) and set for the body (chunked). With the default 1 MiB before the header, JSON
  // bodies over 1 MiB were refused although the limit was 16 MiB.
  void on_header(beast::error_code ec, size_t) {
    if (ec) return on_read(ec, 0);
    std::string path;
    std::map<std::string, std::string> query;
    url_split(std::string(parser_->get().target()), path, query);
    const size_t limit =
        is_upload(path) ? env_.config.max_upload_bytes : env_.config.max_body_bytes;
    const boost::optional<std::uint64_t> length = parser_->content_length();
    if (length && *length > limit) return on_read(http::error::body_limit, 0);
    parser_->body_limit(limit);
    if (parser_->is_done()) return on_read(ec, 0);
    http::async_read(stream_, buffer_, *parser_,
                     beast::bind_front_handler(&HttpSession::on_read, shared_from_this()));
  }

  void on_read(beast::error_code ec, size_t) {
    if (ec == http::error::end_of_stream || ec == beast::error::timeout || ec == net::error::eof)
      return close();
    if (ec == http::error::body_limit)
      return reply(HttpResponse::error(413, "request body too large"), false);
    if (ec == http::error::header_limit)
      return reply(HttpResponse::error(431, "request headers too large"), false);
    if (ec) {
      if (ec.category() == beast::error_code(http::error::bad_target).category())  // a parse error
        return reply(HttpResponse::error(400, "malformed HTTP request"), false);
      return close();
    }
    http::request<http::string_body> req = parser_->release();
    HttpRequest r;
    url_split(std::string(req.target()), r.path, r.query);
    if (websocket::is_upgrade(req)) return upgrade(std::move(req), r);
    r.method = std::string(req.method_string());
    r.content_type = std::string(req[http::field::content_type]);
    r.body = std::move(req.body());
    reply(env_.router.dispatch(r), req.keep_alive());
  }

  void upgrade(http::request<http::string_body> req, const HttpRequest& r) {
    const std::string path = route_path_strip_api(r.path);
    if (path != "/ws") return reply(HttpResponse::error(404, "no WebSocket at " + r.path), false);
    WsSessionOptions o;
    auto it = r.query.find("clientId");
    if (it != r.query.end()) o.client_id = it->second;
    o.queue_frames = env_.config.ws_queue_frames;
    o.queue_remaining = env_.queue_remaining;
    stream_.expires_never();
    ws_session_run(stream_.release_socket(), std::move(req), env_.hub, std::move(o));
  }

  void reply(HttpResponse r, bool keep_alive) {
    auto res =
        std::make_shared<http::response<http::string_body>>(http::status(unsigned(r.status)), 11);
    res->set(http::field::server, "headroom");
    res->set(http::field::content_type, r.content_type);
    for (const auto& [k, v] : r.headers) res->set(k, v);
    res->keep_alive(keep_alive);
    res->body() = std::move(r.body);
    res->prepare_payload();
    stream_.expires_after(kReadTimeout);
    http::async_write(stream_, *res,
                      [self = shared_from_this(), res](beast::error_code ec, size_t) {
                        if (ec || res->need_eof()) return self->close();
                        self->read_header();
                      });
  }

  void close() {
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
    stream_.socket().close(ec);
  }

  beast::tcp_stream stream_;
  const SessionEnv& env_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
};

}  // namespace

struct HttpListener::Impl {
  Impl(const ServerConfig& c, const Router& r, WsHub& h, std::function<size_t()> q)
      : env{c, r, h, std::move(q)},
        ioc(std::max(1, c.io_threads)),
        acceptor(net::make_strand(ioc)) {}

  void accept() {
    acceptor.async_accept(net::make_strand(ioc), [this](beast::error_code ec, tcp::socket s) {
      if (!acceptor.is_open()) return;
      if (!ec) std::make_shared<HttpSession>(std::move(s), env)->run();
      accept();
    });
  }

  SessionEnv env;
  net::io_context ioc;
  tcp::acceptor acceptor;
  std::vector<std::thread> threads;
  uint16_t port = 0;
};

HttpListener::HttpListener(const ServerConfig& config, const Router& router, WsHub& hub,
                           std::function<size_t()> queue_remaining)
    : impl_(std::make_unique<Impl>(config, router, hub, std::move(queue_remaining))) {}

HttpListener::~HttpListener() { stop(); }

Status HttpListener::start() {
  const ServerConfig& c = impl_->env.config;
  beast::error_code ec;
  const auto address = net::ip::make_address(c.listen, ec);
  if (ec) return make_error(ErrorCode::INVALID_ARGUMENT, "--listen {}: {}", c.listen, ec.message());
  const tcp::endpoint ep(address, c.port);
  tcp::acceptor& a = impl_->acceptor;
  a.open(ep.protocol(), ec);
  if (!ec) a.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) a.bind(ep, ec);
  if (!ec) a.listen(net::socket_base::max_listen_connections, ec);
  if (ec)
    return make_error(ErrorCode::IO, "cannot listen on {}:{}: {}", c.listen, c.port, ec.message());
  impl_->port = a.local_endpoint().port();
  impl_->accept();
  for (int i = 0; i < std::max(1, c.io_threads); ++i)
    impl_->threads.emplace_back([this] {
      signal_stack_install();  // Note [alternate signal stacks]
      impl_->ioc.run();
    });
  return Status();
}

uint16_t HttpListener::port() const { return impl_->port; }

void HttpListener::stop() {
  if (!impl_) return;
  net::dispatch(impl_->acceptor.get_executor(), [this] {
    beast::error_code ec;
    impl_->acceptor.close(ec);
  });
  impl_->ioc.stop();
  for (std::thread& t : impl_->threads)
    if (t.joinable()) t.join();
  impl_->threads.clear();
}

}  // namespace hr
