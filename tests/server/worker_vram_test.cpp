// WorkerVramLatest (Note [latest per worker]): the latest data per worker, only live workers'.
#include "server/worker_vram.h"

#include <gtest/gtest.h>

namespace hr {
namespace {

Json update(const std::string& worker, int total) {
  return Json{{"worker", worker}, {"device", "cpu"}, {"allocator", {{"total", total}}}};
}

Json heartbeats(std::initializer_list<const char*> ids) {
  Json out = Json::array();
  for (const char* id : ids) out.push_back(Json{{"id", id}});
  return out;
}

TEST(WorkerVramLatest, KeepsTheLatestOfEachLiveWorkerInHeartbeatOrder) {
  WorkerVramLatest latest;
  latest.put(update("b", 1));
  latest.put(update("a", 2));
  latest.put(update("b", 3));
  std::vector<Json> live = latest.live(heartbeats({"a", "b", "c"}));
  ASSERT_EQ(live.size(), 2u);
  EXPECT_EQ(live[0]["worker"], "a");
  EXPECT_EQ(live[1]["allocator"]["total"], 3);
}

TEST(WorkerVramLatest, ForgetsWorkersWithoutAHeartbeat) {
  WorkerVramLatest latest;
  latest.put(update("a", 1));
  latest.put(update("gone", 1));
  EXPECT_EQ(latest.live(heartbeats({"a"})).size(), 1u);
  EXPECT_EQ(latest.size(), 1u);
  EXPECT_TRUE(latest.live(Json()).empty());  // Redis away: nothing is resent
  EXPECT_EQ(latest.size(), 0u);
}

TEST(WorkerVramLatest, IgnoresDataWithoutAWorker) {
  WorkerVramLatest latest;
  latest.put(Json{{"allocator", {{"total", 1}}}});
  latest.put(Json{{"worker", 5}});
  latest.put(Json::array());
  EXPECT_EQ(latest.size(), 0u);
}

}  // namespace
}  // namespace hr
