// Tests of filling a WeightSet from a checkpoint (models/weight_load.h): prefix loading with
// conversion, mapped views, and the store's host pointers on the CPU backend, lazy upload (through
// the allocator) on a backend whose memory is not host-visible, and errors, on loaded weights.
#include "models/weight_load.h"

#include <gtest/gtest.h>

#include <fmt/format.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "memory/eviction.h"
#include "opaque_cpu_backend.h"

namespace hr {
namespace {

namespace fs = std::filesystem;

class WeightSetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           fmt::format("hr_weights_{}_{}", ::getpid(),
                       ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    path_ = (dir_ / "model.safetensors").string();

    HostTensor w(DType::F32, Shape{2, 3});
    for (int i = 0; i < 6; ++i) w.f32()[i] = 0.5f * float(i) - 1.0f;
    HostTensor b(DType::F32, Shape{3});
    for (int i = 0; i < 3; ++i) b.f32()[i] = 3.0f + float(i);
    HostTensor ids(DType::I64, Shape{1, 4});
    for (int i = 0; i < 4; ++i) static_cast<int64_t*>(ids.data())[i] = i;
    HostTensor idx(DType::I32, Shape{2});
    static_cast<int32_t*>(idx.data())[0] = 5;
    static_cast<int32_t*>(idx.data())[1] = -1;
    HostTensor other(DType::F32, Shape{1});
    w16_ = w.to(DType::F16);
    HostTensor b16 = b.to(DType::F16);
    Status s = safetensors_write(path_, {{"enc.layer.weight", &w16_},
                                         {"enc.layer.bias", &b16},
                                         {"enc.ids", &ids},
                                         {"enc.idx", &idx},
                                         {"dec.weight", &other}});
    ASSERT_TRUE(s.ok()) << s.str();
    auto r = SafetensorsFile::open(path_);
    ASSERT_TRUE(r.ok()) << r.status().str();
    file_ = std::move(r).value();
  }
  void TearDown() override {
    file_.reset();
    fs::remove_all(dir_);
  }

  fs::path dir_;
  std::string path_;
  HostTensor w16_;
  std::unique_ptr<SafetensorsFile> file_;
};

TEST_F(WeightSetTest, LoadPrefixStripsAndConverts) {
  WeightSet ws;
  ASSERT_TRUE(weights_load_prefix(ws, *file_, "enc.", DType::F32).ok());
  EXPECT_EQ(ws.size(), 4u);
  std::vector<std::string> want = {"ids", "idx", "layer.bias", "layer.weight"};
  EXPECT_EQ(ws.names(), want);
  EXPECT_FALSE(ws.contains("dec.weight"));
  EXPECT_FALSE(ws.contains("enc.layer.weight"));

  const HostTensor* w = ws.find("layer.weight");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->desc(), (TensorDesc{DType::F32, Shape{2, 3}}));
  for (int i = 0; i < 6; ++i)
    EXPECT_EQ(w->f32()[i], f16_to_f32(static_cast<const uint16_t*>(w16_.data())[i]));
  EXPECT_EQ(w->f32()[5], 1.5f);
  EXPECT_EQ(ws.find("layer.bias")->f32()[2], 5.0f);
  // Integer tensors keep an integer type.
  EXPECT_EQ(ws.find("ids")->dtype(), DType::I64);
  EXPECT_EQ(static_cast<const int64_t*>(ws.find("ids")->data())[3], 3);
  EXPECT_EQ(ws.find("idx")->dtype(), DType::I32);
  EXPECT_EQ(static_cast<const int32_t*>(ws.find("idx")->data())[1], -1);
  EXPECT_EQ(ws.bytes(), 6u * 4 + 3u * 4 + 4u * 8 + 2u * 4);

  // f16 as the compute dtype keeps the stored values.
  WeightSet half;
  ASSERT_TRUE(weights_load_prefix(half, *file_, "enc.layer.", DType::F16).ok());
  EXPECT_EQ(half.names(), (std::vector<std::string>{"bias", "weight"}));
  EXPECT_EQ(half.find("weight")->dtype(), DType::F16);
  EXPECT_EQ(std::memcmp(half.find("weight")->data(), w16_.data(), w16_.bytes()), 0);

  // A prefix that matches nothing loads nothing.
  WeightSet none;
  ASSERT_TRUE(weights_load_prefix(none, *file_, "model.diffusion_model.", DType::F32).ok());
  EXPECT_EQ(none.size(), 0u);
}

TEST_F(WeightSetTest, WeightGetOnCpuReturnsHostPointers) {
  WeightSet ws;
  ASSERT_TRUE(weights_load_prefix(ws, *file_, "enc.", DType::F32).ok());
  TensorDesc desc{DType::F32, Shape{2, 3}};

  // Unbound: host pointers.
  auto r0 = ws.weight_get("layer.weight", desc);
  ASSERT_TRUE(r0.ok()) << r0.status().str();
  EXPECT_EQ(r0->data, ws.find("layer.weight")->data());

  std::unique_ptr<Backend> cpu = cpu_backend_create(1);
  Allocator alloc(*cpu, Allocator::kUnlimited, eviction_policy());
  ws.bind(cpu.get(), &alloc);
  auto r = ws.weight_get("layer.weight", desc);
  ASSERT_TRUE(r.ok()) << r.status().str();
  EXPECT_EQ(r->data, ws.find("layer.weight")->data());
  EXPECT_EQ(r->desc, desc);
  // Note [adopted bytes]: no copy on a host-visible backend, but the bytes count.
  EXPECT_EQ(alloc.stats(Pool::WEIGHTS).current, 256u) << "2x3 f32 rounded to the alignment";
  ws.weight_evict("layer.weight", WeightLayout::STORED);
  EXPECT_EQ(alloc.total().current, 0u);
  auto h = ws.weight_host("layer.weight", desc, WeightLayout::STORED);
  ASSERT_TRUE(h.ok()) << h.status().str();
  EXPECT_EQ(h->data, ws.find("layer.weight")->data());
  EXPECT_EQ(alloc.total().current, 0u) << "a streamed weight holds no device bytes";
}

TEST_F(WeightSetTest, WeightGetErrors) {
  WeightSet ws;
  ASSERT_TRUE(weights_load_prefix(ws, *file_, "enc.", DType::F32).ok());
  std::unique_ptr<Backend> cpu = cpu_backend_create(1);
  Allocator alloc(*cpu, Allocator::kUnlimited, eviction_policy());
  ws.bind(cpu.get(), &alloc);

  auto missing = ws.weight_get("layer.nope", TensorDesc{DType::F32, Shape{2}});
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), ErrorCode::NOT_FOUND);
  EXPECT_NE(missing.status().message().find("layer.nope"), std::string::npos);

  auto shape = ws.weight_get("layer.weight", TensorDesc{DType::F32, Shape{3, 2}});
  ASSERT_FALSE(shape.ok());
  EXPECT_EQ(shape.status().code(), ErrorCode::INVALID_ARGUMENT);
  EXPECT_NE(shape.status().message().find("layer.weight"), std::string::npos);

  auto dtype = ws.weight_get("layer.weight", TensorDesc{DType::F16, Shape{2, 3}});
  ASSERT_FALSE(dtype.ok());
  EXPECT_EQ(dtype.status().code(), ErrorCode::INVALID_ARGUMENT);

  // A missing file tensor surfaces as a load error with the file name.
  auto st = file_->load("enc.nope");
  EXPECT_EQ(st.status().code(), ErrorCode::NOT_FOUND);
}

TEST_F(WeightSetTest, UploadOnceOnOpaqueBackend) {
  WeightSet ws;
  ASSERT_TRUE(weights_load_prefix(ws, *file_, "enc.", DType::F32).ok());
  OpaqueCpuBackend dev;
  Allocator alloc(dev, Allocator::kUnlimited, eviction_policy());
  ws.bind(&dev, &alloc);
  TensorDesc desc{DType::F32, Shape{2, 3}};

  auto r = ws.weight_get("layer.weight", desc);
  ASSERT_TRUE(r.ok()) << r.status().str();
  EXPECT_NE(r->data, ws.find("layer.weight")->data());
  EXPECT_EQ(std::memcmp(r->data, ws.find("layer.weight")->data(), desc.bytes()), 0);
  EXPECT_EQ(dev.uploads, 1);
  EXPECT_GT(alloc.stats(Pool::WEIGHTS).current, 0u);

  auto again = ws.weight_get("layer.weight", desc);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->data, r->data) << "device copy is kept resident";
  EXPECT_EQ(dev.uploads, 1);

  // put() replaces the host copy and drops the stale device copy.
  HostTensor fresh(DType::F32, Shape{2, 3});
  fresh.f32()[0] = 42.0f;
  ws.put("layer.weight", std::move(fresh));
  auto after = ws.weight_get("layer.weight", desc);
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(static_cast<const float*>(after->data)[0], 42.0f);
  EXPECT_EQ(dev.uploads, 2);

  ws.release_device();
  const PoolStats w = alloc.stats(Pool::WEIGHTS);
  EXPECT_EQ(w.current, w.cached) << "only an idle cached block is left (Note [weight block cache])";
  EXPECT_EQ(alloc.reclaim(UINT64_MAX), w.cached);
  EXPECT_EQ(alloc.stats(Pool::WEIGHTS).current, 0u);
  EXPECT_TRUE(ws.contains("layer.weight")) << "host copies stay";
}

// Note [mapped weights]: tensors stored in the target dtype are views of the file's mapping
// (nothing copied), which stays valid after the caller drops the file, and uploads read them;
// converted tensors are copies.
TEST_F(WeightSetTest, MappedWhenNoConversionIsNeeded) {
  auto opened = SafetensorsFile::open(path_);
  ASSERT_TRUE(opened.ok());
  std::shared_ptr<const SafetensorsFile> file(std::move(opened).value());
  WeightSet half, full;
  ASSERT_TRUE(weights_load_prefix(half, file, "enc.", DType::F16).ok());
  ASSERT_TRUE(weights_load_prefix(full, file, "enc.", DType::F32).ok());
  file.reset();  // the views keep the mapping
  ASSERT_NE(half.find("layer.weight"), nullptr);
  EXPECT_TRUE(half.find("layer.weight")->is_view());
  EXPECT_TRUE(half.find("layer.bias")->is_view());
  EXPECT_FALSE(full.find("layer.weight")->is_view()) << "f16 to f32 is a copy";
  // Integer tensors are views in both when the file aligns them for their type.
  EXPECT_EQ(half.mapped_bytes(), 12u + 6u + full.mapped_bytes());
  EXPECT_EQ(std::memcmp(half.find("layer.weight")->data(), w16_.data(), 12), 0);

  OpaqueCpuBackend dev;
  Allocator alloc(dev, Allocator::kUnlimited, eviction_policy());
  half.bind(&dev, &alloc);
  TensorDesc desc{DType::F16, Shape{2, 3}};
  auto r = half.weight_get("layer.weight", desc);
  ASSERT_TRUE(r.ok()) << r.status().str();
  EXPECT_EQ(std::memcmp(r->data, w16_.data(), 12), 0);
  half.release_device();  // uploaded again from the mapping (its pages were given back)
  auto again = half.weight_get("layer.weight", desc);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(std::memcmp(again->data, w16_.data(), 12), 0);
  EXPECT_EQ(dev.uploads, 2);
  half.bind(nullptr, nullptr);
}

// A model still bound to an allocator that is destroyed gives its device copies back while the
// allocator can take them, and can be bound again.
TEST_F(WeightSetTest, OutlivesItsAllocator) {
  WeightSet ws;
  ASSERT_TRUE(weights_load_prefix(ws, *file_, "enc.", DType::F32).ok());
  OpaqueCpuBackend dev;
  TensorDesc desc{DType::F32, Shape{2, 3}};
  {
    Allocator alloc(dev, Allocator::kUnlimited, eviction_policy());
    ws.bind(&dev, &alloc);
    ASSERT_TRUE(ws.weight_get("layer.weight", desc).ok());
    EXPECT_GT(alloc.stats(Pool::WEIGHTS).current, 0u);
  }
  EXPECT_EQ(ws.device_bytes(), 0u);
  Allocator again(dev, Allocator::kUnlimited, eviction_policy());
  ws.bind(&dev, &again);
  auto r = ws.weight_get("layer.weight", desc);
  ASSERT_TRUE(r.ok()) << r.status().str();
  EXPECT_EQ(std::memcmp(r->data, ws.find("layer.weight")->data(), desc.bytes()), 0);
  EXPECT_EQ(dev.uploads, 2);
  ws.bind(nullptr, nullptr);
}

}  // namespace
}  // namespace hr
