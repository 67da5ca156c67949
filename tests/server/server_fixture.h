// An in-process `headroom serve` on an ephemeral port, on the CPU, with the tiny checkpoint and
// its own folders and database under a temporary directory.
#pragma once

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "server/serve_app.h"
#include "server_client.h"

namespace hr::test {

// The device the server tests run the worker on: HEADROOM_SERVER_TEST_DEVICE (cuda for the GPU
// run of the server tests, scripts/device.sh server), else cpu.
inline std::string server_test_device() {
  const char* device = std::getenv("HEADROOM_SERVER_TEST_DEVICE");
  return device && *device ? device : "cpu";
}

class ServerTest : public ::testing::Test {
 protected:
  // Options a test suite may change before the server starts.
  virtual void configure(ServeOptions&) {}

  void SetUp() override {
    static std::atomic<int> counter{0};
    dir_ =
        std::filesystem::temp_directory_path() / fmt::format("hr_srv_{}_{}", ::getpid(), counter++);
    std::filesystem::remove_all(dir_);
    ServeOptions o;
    o.server.port = 0;
    o.server.output_dir = (dir_ / "output").string();
    o.server.input_dir = (dir_ / "input").string();
    o.server.temp_dir = (dir_ / "temp").string();
    o.server.vram_busy_ms = 20;
    o.server.vram_idle_ms = 50;
    o.models_dir = models_folder_make(dir_).string();
    o.device = server_test_device();
    o.threads = 1;  // OpenMP teams spin when tests share the cores (ctest -j)
    o.database = (dir_ / "jobs.sqlite").string();
    configure(o);
    Result<std::unique_ptr<ServeApp>> app = ServeApp::start(o);
    ASSERT_TRUE(app.ok()) << app.status().str();
    app_ = std::move(app).value();
    port_ = app_->port();
  }

  void TearDown() override {
    app_.reset();
    std::filesystem::remove_all(dir_);
  }

  // POST /prompt for `client`; the prompt_id, or "" (with a test failure) when refused.
  std::string queue_prompt(const Json& workflow, const std::string& client = "test-client") {
    HttpResult r =
        http_post_json(port_, "/prompt", Json{{"prompt", workflow}, {"client_id", client}});
    EXPECT_EQ(r.status, 200) << r.body;
    return r.status == 200 ? r.json().value("prompt_id", "") : "";
  }

  std::filesystem::path dir_;
  std::unique_ptr<ServeApp> app_;
  uint16_t port_ = 0;
};

}  // namespace hr::test
