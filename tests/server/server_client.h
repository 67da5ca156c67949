// Test clients for the server: blocking HTTP requests and a WebSocket reader with timeouts, on
// Boost.Beast, plus the tiny-checkpoint models folder and workflow the server tests share.
#pragma once

#include <unistd.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>
#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "test_paths.h"

namespace hr::test {

namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
namespace net = boost::asio;
using tcp = net::ip::tcp;
using Json = nlohmann::json;

struct HttpResult {
  int status = 0;  // 0: no response (connection closed)
  std::string body;
  std::string content_type;
  Json json() const { return Json::parse(body, nullptr, false); }
};

inline HttpResult http_call(uint16_t port, const std::string& method, const std::string& target,
                            const std::string& body = "",
                            const std::string& content_type = "application/json") {
  HttpResult out;
  net::io_context ioc;
  beast::tcp_stream stream(ioc);
  beast::error_code ec;
  stream.connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), port), ec);
  if (ec) return out;
  http::request<http::string_body> req(http::string_to_verb(method), target, 11);
  req.set(http::field::host, "127.0.0.1");
  if (!body.empty() || method == "POST") {
    req.set(http::field::content_type, content_type);
    req.body() = body;
    req.prepare_payload();
  }
  http::write(stream, req, ec);
  if (ec) return out;
  beast::flat_buffer buf;
  http::response_parser<http::string_body> parser;
  parser.body_limit(256ull << 20);
  http::read(stream, buf, parser, ec);
  if (ec) return out;
  out.status = int(parser.get().result_int());
  out.body = parser.get().body();
  out.content_type = std::string(parser.get()[http::field::content_type]);
  stream.socket().shutdown(tcp::socket::shutdown_both, ec);
  return out;
}

inline HttpResult http_post_json(uint16_t port, const std::string& target, const Json& body) {
  return http_call(port, "POST", target, body.dump());
}

// A ComfyUI client's WebSocket: connects to /ws?clientId=, then reads messages one by one.
class WsReader {
 public:
  bool connect(uint16_t port, const std::string& client_id) {
    beast::error_code ec;
    beast::get_lowest_layer(ws_).connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), port),
                                         ec);
    if (ec) return false;
    ws_.handshake("127.0.0.1:" + std::to_string(port), "/ws?clientId=" + client_id, ec);
    return !ec;
  }
  // The next text message as JSON ({"type", "data"}); nullopt on timeout or a closed socket.
  std::optional<Json> next(std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
    while (true) {
      beast::flat_buffer buf;
      beast::error_code ec = net::error::timed_out;
      bool done = false;
      beast::get_lowest_layer(ws_).expires_after(timeout);
      ws_.async_read(buf, [&](beast::error_code e, size_t) {
        ec = e;
        done = true;
      });
      // run_one, not run: the stream's expiry timer stays armed after the read completes.
      ioc_.restart();
      while (!done && ioc_.run_one()) {
      }
      if (ec) return std::nullopt;
      if (!ws_.got_text()) {  // binary preview frames
        binaries.push_back(beast::buffers_to_string(buf.data()));
        continue;
      }
      Json j = Json::parse(beast::buffers_to_string(buf.data()), nullptr, false);
      if (!j.is_discarded()) return j;
    }
  }
  // Reads until a message of `type` (for `prompt_id` when given) arrives; every message read on
  // the way is appended to `seen`.
  std::optional<Json> until(const std::string& type, const std::string& prompt_id,
                            std::vector<Json>* seen = nullptr,
                            std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
    const auto end = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < end) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          end - std::chrono::steady_clock::now());
      std::optional<Json> m = next(left);
      if (!m) return std::nullopt;
      if (seen) seen->push_back(*m);
      if ((*m)["type"] == type &&
          (prompt_id.empty() || (*m)["data"].value("prompt_id", "") == prompt_id))
        return m;
    }
    return std::nullopt;
  }
  // Reads until `executing` with node null for `prompt_id` (ComfyUI clients wait for this).
  std::optional<Json> until_done(const std::string& prompt_id, std::vector<Json>* seen = nullptr) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (std::chrono::steady_clock::now() < end) {
      std::optional<Json> m = until("executing", prompt_id, seen);
      if (!m) return std::nullopt;
      if ((*m)["data"]["node"].is_null()) return m;
    }
    return std::nullopt;
  }
  websocket::stream<beast::tcp_stream>& stream() { return ws_; }
  std::vector<std::string> binaries;  // binary frames read so far, in order

 private:
  net::io_context ioc_;
  websocket::stream<beast::tcp_stream> ws_{ioc_};
};

// A models folder with the tiny SD1 checkpoint (and its config) linked in.
inline std::filesystem::path models_folder_make(const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  fs::create_directories(dir / "models/checkpoints");
  for (const char* f : {"tiny-sd1.safetensors", "tiny-sd1.yaml"}) {
    std::error_code ec;
    fs::create_symlink(golden_path(f), dir / "models/checkpoints" / f, ec);
  }
  return dir / "models";
}

// ComfyUI's default graph on the tiny checkpoint: width x height, `steps` euler steps.
inline Json tiny_workflow(int size = 64, int steps = 2, int64_t seed = 5) {
  return Json::parse(R"({
    "4": {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": "tiny-sd1.safetensors"}},
    "5": {"class_type": "EmptyLatentImage", "inputs": {"width": 64, "height": 64, "batch_size": 1}},
    "6": {"class_type": "CLIPTextEncode", "inputs": {"text": "a cat", "clip": ["4", 1]}},
    "7": {"class_type": "CLIPTextEncode", "inputs": {"text": "", "clip": ["4", 1]}},
    "3": {"class_type": "KSampler", "inputs": {"seed": 5, "steps": 2, "cfg": 7.0, "sampler_name": "euler",
          "scheduler": "normal", "denoise": 1.0, "model": ["4", 0], "positive": ["6", 0],
          "negative": ["7", 0], "latent_image": ["5", 0]}},
    "8": {"class_type": "VAEDecode", "inputs": {"samples": ["3", 0], "vae": ["4", 2]}},
    "9": {"class_type": "SaveImage", "inputs": {"filename_prefix": "srv", "images": ["8", 0]}}
  })")
      .patch(Json::array({{{"op", "replace"}, {"path", "/5/inputs/width"}, {"value", size}},
                          {{"op", "replace"}, {"path", "/5/inputs/height"}, {"value", size}},
                          {{"op", "replace"}, {"path", "/3/inputs/steps"}, {"value", steps}},
                          {{"op", "replace"}, {"path", "/3/inputs/seed"}, {"value", seed}}}));
}

}  // namespace hr::test
