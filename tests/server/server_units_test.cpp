// The server's pure parts: routing, URL decoding, multipart parsing, path confinement, and the
// WebSocket hub dropping a client whose send queue is full.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "core/path_confine.h"
#include "server/multipart.h"
#include "server/router.h"
#include "server/ws_hub.h"

namespace hr {
namespace {

namespace fs = std::filesystem;

TEST(Router, MatchesPatternsAndTheApiPrefix) {
  Router r;
  r.add("GET", "/history/{id}", [](const HttpRequest&, const std::vector<std::string>& p) {
    return HttpResponse::text(200, p[0]);
  });
  r.add("GET", "/throws", [](const HttpRequest&, auto&) -> HttpResponse {
    return HttpResponse::json(200, Json(1).at("x"));
  });
  HttpRequest q{"GET", "/api/history/abc", {}, "", ""};
  EXPECT_EQ(r.dispatch(q).body, "abc");
  q.path = "/history/abc";
  EXPECT_EQ(r.dispatch(q).body, "abc");
  q.method = "POST";
  EXPECT_EQ(r.dispatch(q).status, 405);
  q = HttpRequest{"GET", "/history", {}, "", ""};
  EXPECT_EQ(r.dispatch(q).status, 404);
  q.path = "/throws";
  EXPECT_EQ(r.dispatch(q).status, 400);
}

TEST(Url, SplitsAndDecodes) {
  std::string path;
  std::map<std::string, std::string> q;
  url_split("/view%20x?filename=a+b%2Fc.png&type=output&bad=%zz&flag", path, q);
  EXPECT_EQ(path, "/view x");
  EXPECT_EQ(q["filename"], "a b/c.png");
  EXPECT_EQ(q["type"], "output");
  EXPECT_EQ(q["bad"], "%zz");
  EXPECT_EQ(q.count("flag"), 1u);
}

TEST(Multipart, ParsesFieldsAndFiles) {
  const std::string body =
      "--B\r\nContent-Disposition: form-data; name=\"image\"; filename=\"x.png\"\r\nContent-Type: "
      "image/png\r\n\r\n"
      "\x89PNG\r\n--not-the-boundary\r\n--B\r\nContent-Disposition: form-data; "
      "name=\"overwrite\"\r\n\r\ntrue\r\n--B--\r\n";
  Result<std::vector<MultipartPart>> parts =
      multipart_parse("multipart/form-data; boundary=B", body);
  ASSERT_TRUE(parts.ok()) << parts.status().str();
  ASSERT_EQ(parts->size(), 2u);
  EXPECT_EQ((*parts)[0].name, "image");
  EXPECT_EQ((*parts)[0].filename, "x.png");
  EXPECT_EQ((*parts)[0].data, "\x89PNG\r\n--not-the-boundary");
  EXPECT_EQ(multipart_find(*parts, "overwrite")->data, "true");
  EXPECT_FALSE(multipart_parse("multipart/form-data", body).ok());
  EXPECT_FALSE(multipart_parse("multipart/form-data; boundary=B", "--B\r\nno end").ok());
  EXPECT_FALSE(multipart_parse("application/json; boundary=B", body).ok());
}

TEST(PathConfined, RefusesEveryWayOut) {
  const fs::path root = fs::temp_directory_path() / fmt::format("hr_confined_{}", ::getpid());
  fs::remove_all(root);
  fs::create_directories(root / "out/sub");
  std::ofstream(root / "out/sub/a.png") << "a";
  fs::create_symlink(root, root / "out/up");
  fs::create_symlink(root / "out/sub", root / "out/inside");
  const std::string out = (root / "out").string();
  EXPECT_TRUE(path_confined(out, "sub", "a.png").ok());
  EXPECT_TRUE(path_confined(out, "inside", "a.png").ok());  // a link that stays inside
  EXPECT_TRUE(path_confined(out, "", "new.png").ok());      // need not exist (uploads)
  EXPECT_FALSE(path_confined(out, "", "").ok());
  EXPECT_FALSE(path_confined(out, "", "../a.png").ok());
  EXPECT_FALSE(path_confined(out, "sub/../..", "a.png").ok());
  EXPECT_FALSE(path_confined(out, "/etc", "passwd").ok());
  EXPECT_FALSE(path_confined(out, "", "/etc/passwd").ok());
  EXPECT_FALSE(path_confined(out, "up", "secret.txt").ok());
  EXPECT_FALSE(path_confined(out, "", std::string("a\0b", 3)).ok());
  fs::remove_all(root);
}

// A client that accepts `room` frames and then reports a full queue.
class FakeClient : public WsClient {
 public:
  explicit FakeClient(int room) : room_(room) {}
  bool send(std::shared_ptr<const std::string> frame, bool) override {
    if (room_ == 0) return false;
    --room_;
    frames.push_back(*frame);
    return true;
  }
  std::vector<std::string> frames;

 private:
  int room_;
};

TEST(WsHub, DropsAClientWhoseQueueIsFullAndKeepsTheOthers) {
  WsHub hub;
  auto slow = std::make_shared<FakeClient>(2);
  auto fast = std::make_shared<FakeClient>(1000);
  auto other = std::make_shared<FakeClient>(1000);
  hub.join("slow", slow);
  hub.join("fast", fast);
  hub.join("other", other);
  for (int i = 0; i < 5; ++i) hub.send("", "progress", Json{{"value", i}});
  hub.send("fast", "executed", Json::object());
  EXPECT_EQ(slow->frames.size(), 2u);
  EXPECT_EQ(fast->frames.size(), 6u);
  EXPECT_EQ(other->frames.size(), 5u);
  EXPECT_EQ(hub.clients(), 2u);
  EXPECT_EQ(hub.dropped(), 1u);
  EXPECT_EQ(Json::parse(fast->frames.back())["type"], "executed");
}

}  // namespace
}  // namespace hr
