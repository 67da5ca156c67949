// Tests of the safetensors reader and writer: round trips, every corrupt-file case, conversion
// on load, and the tensor list of the tiny SD1 golden checkpoint.
#include "models/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "test_paths.h"

namespace hr {
namespace {

namespace fs = std::filesystem;

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ =
        fs::temp_directory_path() / fmt::format("hr_safetensors_{}_{}", ::getpid(), info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // Writes a file with the given header length field, header text and data bytes.
  std::string write_raw(const std::string& name, uint64_t header_len, const std::string& header,
                        const std::string& data) {
    std::string p = path(name);
    std::ofstream f(p, std::ios::binary);
    for (int i = 0; i < 8; ++i) f.put(char(uint8_t(header_len >> (8 * i))));
    f << header << data;
    return p;
  }
  std::string write_header(const std::string& name, const std::string& header, size_t data_bytes) {
    return write_raw(name, header.size(), header, std::string(data_bytes, '\0'));
  }

  // Opens `p` expecting failure with `code`; the message names the file and contains `word`.
  void expect_open_error(const std::string& p, ErrorCode code, const std::string& word) {
    auto r = SafetensorsFile::open(p);
    ASSERT_FALSE(r.ok()) << p << " opened";
    EXPECT_EQ(r.status().code(), code) << r.status().str();
    EXPECT_NE(r.status().message().find(fs::path(p).filename().string()), std::string::npos)
        << r.status().str();
    EXPECT_NE(r.status().message().find(word), std::string::npos)
        << "'" << word << "' not in: " << r.status().str();
  }

  fs::path dir_;
};

HostTensor iota_f32(Shape s, float scale) {
  HostTensor t(DType::F32, s);
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = float(i) * scale - 1.5f;
  return t;
}

TEST_F(SafetensorsTest, RoundTripComputeDtypesAndMetadata) {
  HostTensor f32 = iota_f32({2, 3, 4}, 0.25f);
  HostTensor f16 = iota_f32({5, 7}, 0.5f).to(DType::F16);
  HostTensor bf16 = iota_f32({3}, 2.0f).to(DType::BF16);
  HostTensor i32(DType::I32, Shape{4});
  HostTensor i64(DType::I64, Shape{1, 77});
  for (int i = 0; i < 4; ++i) static_cast<int32_t*>(i32.data())[i] = -7 + 1000000 * i;
  for (int i = 0; i < 77; ++i) static_cast<int64_t*>(i64.data())[i] = int64_t(i) << 33;
  HostTensor scalar(DType::F32, Shape{});
  scalar.f32()[0] = 4.6055f;
  std::map<std::string, std::string> meta = {{"format", "pt"}, {"headroom.tokenizer", "bundled"}};

  std::string p = path("rt.safetensors");
  // Deliberately unsorted input: the writer sorts.
  ASSERT_TRUE(safetensors_write(p,
                                {{"z.f32", &f32},
                                 {"a.f16", &f16},
                                 {"m.bf16", &bf16},
                                 {"c.i32", &i32},
                                 {"b.i64", &i64},
                                 {"s.scalar", &scalar}},
                                meta)
                  .ok());
  EXPECT_FALSE(fs::exists(fmt::format("{}.tmp-{}", p, ::getpid())));

  // Header padded to a multiple of 8 bytes with spaces.
  {
    std::ifstream in(p, std::ios::binary);
    uint8_t len[8];
    in.read(reinterpret_cast<char*>(len), 8);
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | len[i];
    EXPECT_EQ(n % 8, 0u);
    std::string header(n, '\0');
    in.read(header.data(), std::streamsize(n));
    EXPECT_EQ(header.front(), '{');
    EXPECT_TRUE(header.back() == '}' || header.back() == ' ');
  }

  auto r = SafetensorsFile::open(p);
  ASSERT_TRUE(r.ok()) << r.status().str();
  const SafetensorsFile& f = **r;
  EXPECT_EQ(f.path(), p);
  EXPECT_EQ(f.metadata(), meta);
  ASSERT_EQ(f.entries().size(), 6u);
  const char* names[] = {"a.f16", "b.i64", "c.i32", "m.bf16", "s.scalar", "z.f32"};
  uint64_t offset = 0;
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(f.entries()[i].name, names[i]);
    EXPECT_EQ(f.entries()[i].begin, offset) << "offsets contiguous in name order";
    offset = f.entries()[i].end;
  }
  EXPECT_EQ(f.find("a.f16")->dtype, DType::F16);
  EXPECT_EQ(f.find("a.f16")->shape, (Shape{5, 7}));
  EXPECT_EQ(f.find("s.scalar")->shape.rank, 0);
  EXPECT_EQ(f.find("nope"), nullptr);
  EXPECT_TRUE(f.contains("b.i64"));

  auto check = [&](const char* name, const HostTensor& want) {
    auto t = f.load(name);
    ASSERT_TRUE(t.ok()) << t.status().str();
    EXPECT_EQ(t->desc(), want.desc()) << name;
    EXPECT_EQ(std::memcmp(t->data(), want.data(), want.bytes()), 0) << name;
    auto raw = f.raw(*f.find(name));
    ASSERT_EQ(raw.size(), want.bytes());
    EXPECT_EQ(std::memcmp(raw.data(), want.data(), want.bytes()), 0) << name;
  };
  check("z.f32", f32);
  check("a.f16", f16);
  check("m.bf16", bf16);
  check("c.i32", i32);
  check("b.i64", i64);
  check("s.scalar", scalar);

  // Explicit conversion: f16 -> f32 is exact.
  auto up = f.load("a.f16", DType::F32);
  ASSERT_TRUE(up.ok());
  HostTensor want = f16.to(DType::F32);
  EXPECT_EQ(std::memcmp(up->data(), want.data(), want.bytes()), 0);
}

TEST_F(SafetensorsTest, EmptyFileListAndZeroSizedTensor) {
  std::string p = path("empty.safetensors");
  ASSERT_TRUE(safetensors_write(p, {}).ok());
  auto r = SafetensorsFile::open(p);
  ASSERT_TRUE(r.ok()) << r.status().str();
  EXPECT_TRUE((*r)->entries().empty());
  EXPECT_TRUE((*r)->metadata().empty());

  HostTensor z(DType::F16, Shape{0, 4});
  HostTensor one = iota_f32({2}, 1.0f);
  std::string q = path("zero.safetensors");
  ASSERT_TRUE(safetensors_write(q, {{"z", &z}, {"a", &one}, {"y", &z}}).ok());
  auto s = SafetensorsFile::open(q);
  ASSERT_TRUE(s.ok()) << s.status().str();
  auto t = (*s)->load("z");
  ASSERT_TRUE(t.ok()) << t.status().str();
  EXPECT_EQ(t->numel(), 0);
}

// safetensors_write_streamed: each tensor's bytes handed over in pieces, in name order; a fill
// that hands over the wrong byte count fails and leaves no file.
TEST_F(SafetensorsTest, StreamedWriteTakesPiecesAndChecksTheirBytes) {
  HostTensor a = iota_f32({3, 5}, 0.25f), b = iota_f32({7}, -1.0f);
  std::vector<SafetensorsPlanned> list = {{"z.b", DType::F32, b.shape()},
                                          {"a", DType::F32, a.shape()}};
  std::vector<std::string> order;
  auto fill = [&](const SafetensorsPlanned& p, const SafetensorsSink& write) -> Status {
    order.push_back(p.name);
    const HostTensor& t = p.name == "a" ? a : b;
    const char* bytes = static_cast<const char*>(t.data());
    for (size_t at = 0; at < t.bytes(); at += 8)
      HR_TRY(write(bytes + at, std::min<size_t>(8, t.bytes() - at)));
    return Status();
  };
  std::string p = path("streamed.safetensors");
  ASSERT_TRUE(safetensors_write_streamed(p, list, {{"k", "v"}}, fill).ok());
  EXPECT_EQ(order, (std::vector<std::string>{"a", "z.b"}));
  auto r = SafetensorsFile::open(p);
  ASSERT_TRUE(r.ok()) << r.status().str();
  EXPECT_EQ((*r)->metadata().at("k"), "v");
  for (const auto& [name, want] :
       {std::pair<const char*, const HostTensor*>{"a", &a}, {"z.b", &b}}) {
    auto t = (*r)->load(name);
    ASSERT_TRUE(t.ok()) << t.status().str();
    ASSERT_EQ(t->shape(), want->shape());
    EXPECT_EQ(std::memcmp(t->data(), want->data(), want->bytes()), 0) << name;
  }
  std::string q = path("short.safetensors");
  Status s = safetensors_write_streamed(
      q, list, {},
      [&](const SafetensorsPlanned&, const SafetensorsSink& write) { return write(a.data(), 4); });
  EXPECT_EQ(s.code(), ErrorCode::INTERNAL) << s.str();
  EXPECT_FALSE(fs::exists(q));
}

TEST_F(SafetensorsTest, MissingFileIsNotFound) {
  std::string p = path("does-not-exist.safetensors");
  auto r = SafetensorsFile::open(p);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::NOT_FOUND);
  EXPECT_NE(r.status().message().find("does-not-exist.safetensors"), std::string::npos);
}

TEST_F(SafetensorsTest, LoadMissingTensorIsNotFound) {
  HostTensor a = iota_f32({2}, 1.0f);
  std::string p = path("one.safetensors");
  ASSERT_TRUE(safetensors_write(p, {{"a", &a}}).ok());
  auto r = SafetensorsFile::open(p);
  ASSERT_TRUE(r.ok());
  auto t = (*r)->load("b");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), ErrorCode::NOT_FOUND);
  EXPECT_NE(t.status().message().find("tensor 'b' not in"), std::string::npos);
  EXPECT_NE(t.status().message().find("one.safetensors"), std::string::npos);
}

TEST_F(SafetensorsTest, WriteIntoMissingDirectoryFails) {
  HostTensor a = iota_f32({2}, 1.0f);
  std::string p = path("no/such/dir/x.safetensors");
  Status s = safetensors_write(p, {{"a", &a}});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), ErrorCode::IO);
  EXPECT_NE(s.message().find("x.safetensors"), std::string::npos) << s.str();
}

TEST_F(SafetensorsTest, WriteRejectsDuplicateNames) {
  HostTensor a = iota_f32({2}, 1.0f);
  Status s = safetensors_write(path("dup.safetensors"), {{"a", &a}, {"a", &a}});
  EXPECT_EQ(s.code(), ErrorCode::INVALID_ARGUMENT);
  EXPECT_FALSE(fs::exists(path("dup.safetensors")));
}

TEST_F(SafetensorsTest, TruncatedFile) {
  std::string p = path("five.safetensors");
  std::ofstream(p, std::ios::binary) << "abcde";
  expect_open_error(p, ErrorCode::CORRUPT, "truncated");
  std::string seven = path("seven.safetensors");
  std::ofstream(seven, std::ios::binary) << std::string(7, '\x08');
  expect_open_error(seven, ErrorCode::CORRUPT, "truncated");
  // An empty file too.
  std::string e = path("zero-bytes.safetensors");
  std::ofstream(e, std::ios::binary).close();
  expect_open_error(e, ErrorCode::CORRUPT, "truncated");
}

TEST_F(SafetensorsTest, TruncatedData) {
  // A valid header whose data section was cut short.
  std::string h = R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})";
  expect_open_error(write_header("cut.safetensors", h, 8), ErrorCode::CORRUPT, "past the data");
}

TEST_F(SafetensorsTest, HeaderLengthPastEndOfFile) {
  std::string h = R"({})";
  expect_open_error(write_raw("hlen.safetensors", 1000, h, ""), ErrorCode::CORRUPT, "past the end");
  expect_open_error(write_raw("absurd.safetensors", 1ull << 40, h, ""), ErrorCode::CORRUPT,
                    "absurd");
  expect_open_error(write_raw("max.safetensors", UINT64_MAX, h, ""), ErrorCode::CORRUPT, "absurd");
}

TEST_F(SafetensorsTest, BadJson) {
  expect_open_error(write_header("bad.safetensors", R"({"a": {"dtype": )", 0), ErrorCode::CORRUPT,
                    "JSON");
  expect_open_error(write_header("garbage.safetensors", "\x01\x02\x03\x04", 0), ErrorCode::CORRUPT,
                    "JSON");
  expect_open_error(write_raw("zero-header.safetensors", 0, "", ""), ErrorCode::CORRUPT, "JSON");
  expect_open_error(write_header("array.safetensors", "[1, 2]", 0), ErrorCode::CORRUPT, "object");
  expect_open_error(write_header("entry.safetensors", R"({"a": 5})", 0), ErrorCode::CORRUPT,
                    "object");
}

TEST_F(SafetensorsTest, MissingField) {
  expect_open_error(
      write_header("nodtype.safetensors", R"({"a":{"shape":[2],"data_offsets":[0,8]}})", 8),
      ErrorCode::CORRUPT, "missing field 'dtype'");
  expect_open_error(
      write_header("noshape.safetensors", R"({"a":{"dtype":"F32","data_offsets":[0,8]}})", 8),
      ErrorCode::CORRUPT, "missing field 'shape'");
  expect_open_error(
      write_header("nooffsets.safetensors", R"({"a":{"dtype":"F32","shape":[2]}})", 8),
      ErrorCode::CORRUPT, "missing field 'data_offsets'");
}

TEST_F(SafetensorsTest, WrongFieldTypes) {
  expect_open_error(
      write_header("dt.safetensors", R"({"a":{"dtype":4,"shape":[2],"data_offsets":[0,8]}})", 8),
      ErrorCode::CORRUPT, "dtype");
  expect_open_error(write_header("sh.safetensors",
                                 R"({"a":{"dtype":"F32","shape":"2","data_offsets":[0,8]}})", 8),
                    ErrorCode::CORRUPT, "shape");
  expect_open_error(write_header("neg.safetensors",
                                 R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8),
                    ErrorCode::CORRUPT, "negative");
  expect_open_error(write_header("float.safetensors",
                                 R"({"a":{"dtype":"F32","shape":[2.5],"data_offsets":[0,8]}})", 8),
                    ErrorCode::CORRUPT, "non-integer");
  expect_open_error(write_header("off1.safetensors",
                                 R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", 8),
                    ErrorCode::CORRUPT, "data_offsets");
  expect_open_error(write_header("offneg.safetensors",
                                 R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[-8,0]}})", 8),
                    ErrorCode::CORRUPT, "data_offsets");
  expect_open_error(write_header("offrev.safetensors",
                                 R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", 8),
                    ErrorCode::CORRUPT, "begin > end");
  expect_open_error(
      write_header("rank.safetensors",
                   R"({"a":{"dtype":"F32","shape":[1,1,1,1,1,1,1],"data_offsets":[0,4]}})", 4),
      ErrorCode::UNSUPPORTED, "rank");
}

TEST_F(SafetensorsTest, OffsetsOutOfRange) {
  expect_open_error(write_header("range.safetensors",
                                 R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})", 8),
                    ErrorCode::CORRUPT, "past the data section");
}

TEST_F(SafetensorsTest, OverlappingOffsets) {
  std::string h = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                  R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})";
  expect_open_error(write_header("overlap.safetensors", h, 12), ErrorCode::CORRUPT, "overlapping");
}

TEST_F(SafetensorsTest, UnknownDtype) {
  expect_open_error(write_header("xyz.safetensors",
                                 R"({"w":{"dtype":"XYZ","shape":[2],"data_offsets":[0,2]}})", 2),
                    ErrorCode::CORRUPT, "unknown dtype 'XYZ' for tensor 'w'");
  expect_open_error(
      write_header("e8m0.safetensors",
                   R"({"w":{"dtype":"F8_E8M0","shape":[2],"data_offsets":[0,2]}})", 2),
      ErrorCode::UNSUPPORTED, "dtype 'F8_E8M0' for tensor 'w'");
  // headroom's own lower-case spelling is not the file format's.
  expect_open_error(write_header("lower.safetensors",
                                 R"({"w":{"dtype":"f32","shape":[2],"data_offsets":[0,8]}})", 8),
                    ErrorCode::CORRUPT, "unknown dtype");
}

TEST_F(SafetensorsTest, ShapeSizeMismatch) {
  expect_open_error(write_header("size.safetensors",
                                 R"({"a":{"dtype":"F16","shape":[3,2],"data_offsets":[0,8]}})", 8),
                    ErrorCode::CORRUPT, "size mismatch");
  // numel * size overflowing 64 bits.
  expect_open_error(
      write_header("huge.safetensors",
                   R"({"a":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,8]}})",
                   8),
      ErrorCode::CORRUPT, "size mismatch");
}

TEST_F(SafetensorsTest, MetadataNotStrings) {
  std::string h = R"({"__metadata__":{"format":"pt","steps":20},)"
                  R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  expect_open_error(write_header("meta.safetensors", h, 8), ErrorCode::CORRUPT, "__metadata__");
  expect_open_error(write_header("meta2.safetensors", R"({"__metadata__":[1]})", 0),
                    ErrorCode::CORRUPT, "__metadata__");
}

TEST_F(SafetensorsTest, HeaderWithTrailingSpacesAndUnalignedData) {
  // Header length 59 (odd): the data section is unaligned in the mapping; load must convert
  // correctly anyway.
  std::string h = R"({"a":{"dtype":"F16","shape":[2],"data_offsets":[0,4]}})";
  h += std::string(59 - h.size(), ' ');
  ASSERT_EQ(h.size(), 59u);
  std::string data = {char(0x00), char(0x3c), char(0x00), char(0xc0)};  // 1.0, -2.0
  auto r = SafetensorsFile::open(write_raw("odd.safetensors", h.size(), h, data));
  ASSERT_TRUE(r.ok()) << r.status().str();
  auto t = (*r)->load("a", DType::F32);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->f32()[0], 1.0f);
  EXPECT_EQ(t->f32()[1], -2.0f);
}

TEST_F(SafetensorsTest, F8AndBF16ConversionOnLoad) {
  // E4M3: 0x38 = 1.0, 0xC0 = -2.0, 0x7E = 448, 0x01 = 2^-9 (smallest subnormal), 0x7F = NaN.
  // E5M2: 0x3C = 1.0, 0xC2 = -3.0, 0x7B = 57344, 0x7C = inf.
  // BF16: 0x3F80 = 1.0, 0xC040 = -3.0, 0x3FC0 = 1.5.
  std::string h = R"({"bf":{"dtype":"BF16","shape":[3],"data_offsets":[0,6]},)"
                  R"("e4":{"dtype":"F8_E4M3","shape":[5],"data_offsets":[6,11]},)"
                  R"("e5":{"dtype":"F8_E5M2","shape":[4],"data_offsets":[11,15]},)"
                  R"("u8":{"dtype":"U8","shape":[2],"data_offsets":[15,17]},)"
                  R"("f64":{"dtype":"F64","shape":[1],"data_offsets":[24,32]}})";
  std::string data(32, '\0');
  const uint8_t bytes[] = {0x80, 0x3f, 0x40, 0xc0, 0xc0, 0x3f,  // bf
                           0x38, 0xc0, 0x7e, 0x01, 0x7f,        // e4
                           0x3c, 0xc2, 0x7b, 0x7c,              // e5
                           200,  7};                            // u8
  std::memcpy(data.data(), bytes, sizeof(bytes));
  double d = 0.1;
  std::memcpy(data.data() + 24, &d, 8);
  auto r = SafetensorsFile::open(write_raw("f8.safetensors", h.size(), h, data));
  ASSERT_TRUE(r.ok()) << r.status().str();
  const SafetensorsFile& f = **r;
  EXPECT_EQ(f.find("e4")->dtype, DType::F8_E4M3);

  // Default load: bf16 stays bf16 (a compute dtype), storage-only types become f32.
  auto bf = f.load("bf");
  ASSERT_TRUE(bf.ok());
  EXPECT_EQ(bf->dtype(), DType::BF16);
  auto bf32 = f.load("bf", DType::F32);
  ASSERT_TRUE(bf32.ok());
  EXPECT_EQ(bf32->f32()[0], 1.0f);
  EXPECT_EQ(bf32->f32()[1], -3.0f);
  EXPECT_EQ(bf32->f32()[2], 1.5f);
  auto bf16 = f.load("bf", DType::F16);
  ASSERT_TRUE(bf16.ok());
  EXPECT_EQ(static_cast<const uint16_t*>(bf16->data())[2], f32_to_f16(1.5f));

  auto e4 = f.load("e4");
  ASSERT_TRUE(e4.ok());
  EXPECT_EQ(e4->dtype(), DType::F32);
  EXPECT_EQ(e4->f32()[0], 1.0f);
  EXPECT_EQ(e4->f32()[1], -2.0f);
  EXPECT_EQ(e4->f32()[2], 448.0f);
  EXPECT_EQ(e4->f32()[3], std::ldexp(1.0f, -9));
  EXPECT_TRUE(std::isnan(e4->f32()[4]));

  auto e5 = f.load("e5", DType::F16);
  ASSERT_TRUE(e5.ok());
  EXPECT_EQ(e5->dtype(), DType::F16);
  const uint16_t* e5h = static_cast<const uint16_t*>(e5->data());
  EXPECT_EQ(f16_to_f32(e5h[0]), 1.0f);
  EXPECT_EQ(f16_to_f32(e5h[1]), -3.0f);
  EXPECT_EQ(f16_to_f32(e5h[2]), 57344.0f);
  EXPECT_TRUE(std::isinf(f16_to_f32(e5h[3])));

  auto u8 = f.load("u8", DType::I32);
  ASSERT_TRUE(u8.ok());
  EXPECT_EQ(static_cast<const int32_t*>(u8->data())[0], 200);
  EXPECT_EQ(static_cast<const int32_t*>(u8->data())[1], 7);

  auto f64 = f.load("f64");
  ASSERT_TRUE(f64.ok());
  EXPECT_EQ(f64->dtype(), DType::F32);
  EXPECT_EQ(f64->f32()[0], 0.1f);

  // Storage-only dtypes are not load targets.
  auto bad = f.load("bf", DType::F8_E4M3);
  EXPECT_EQ(bad.status().code(), ErrorCode::INVALID_ARGUMENT);
}

// The tensor list of tiny-sd1.safetensors, checked against the key list at the end of
// golden/README.md (965 tensors: 684 UNet, 244 VAE, 37 CLIP-L).
TEST(SafetensorsGolden, TinySD1TensorList) {
  std::string p = test::golden_path("tiny-sd1.safetensors");
  auto r = SafetensorsFile::open(p);
  ASSERT_TRUE(r.ok()) << r.status().str();
  const SafetensorsFile& f = **r;
  EXPECT_EQ(f.entries().size(), 965u);

  struct Prefix {
    const char* prefix;
    size_t count;
    int64_t params;  // float parameters (the README's counts exclude int64 position_ids)
  };
  const Prefix prefixes[] = {{"model.diffusion_model.", 684, 3222692},
                             {"first_stage_model.", 244, 1732679},
                             {"cond_stage_model.", 37, 1600672}};
  for (const Prefix& pr : prefixes) {
    size_t count = 0;
    int64_t params = 0, int_elems = 0;
    for (const SafetensorsEntry& e : f.entries()) {
      if (e.name.rfind(pr.prefix, 0) != 0) continue;
      ++count;
      if (dtype_is_float(e.dtype)) {
        EXPECT_EQ(e.dtype, DType::F16) << e.name;
        params += e.shape.numel();
      } else {
        int_elems += e.shape.numel();
      }
    }
    EXPECT_EQ(count, pr.count) << pr.prefix;
    EXPECT_EQ(params, pr.params) << pr.prefix;
    EXPECT_EQ(int_elems, std::string(pr.prefix) == "cond_stage_model." ? 77 : 0) << pr.prefix;
  }

  struct Key {
    const char* name;
    DType dtype;
    Shape shape;
  };
  const Key keys[] = {
      {"model.diffusion_model.input_blocks.0.0.weight", DType::F16, {32, 4, 3, 3}},
      {"model.diffusion_model.time_embed.0.weight", DType::F16, {128, 32}},
      {"model.diffusion_model.time_embed.2.bias", DType::F16, {128}},
      {"model.diffusion_model.output_blocks.9.1.transformer_blocks.0.ff.net.0.proj.weight",
       DType::F16,
       {256, 32}},
      {"first_stage_model.encoder.conv_in.weight", DType::F16, {32, 3, 3, 3}},
      {"first_stage_model.decoder.conv_in.weight", DType::F16, {64, 4, 3, 3}},
      {"first_stage_model.quant_conv.weight", DType::F16, {8, 8, 1, 1}},
      {"first_stage_model.post_quant_conv.weight", DType::F16, {4, 4, 1, 1}},
      {"cond_stage_model.transformer.text_model.embeddings.token_embedding.weight",
       DType::F16,
       {49408, 32}},
      {"cond_stage_model.transformer.text_model.embeddings.position_ids", DType::I64, {1, 77}},
      {"cond_stage_model.transformer.text_model.encoder.layers.0.mlp.fc1.weight",
       DType::F16,
       {64, 32}},
  };
  for (const Key& k : keys) {
    const SafetensorsEntry* e = f.find(k.name);
    ASSERT_NE(e, nullptr) << k.name;
    EXPECT_EQ(e->dtype, k.dtype) << k.name;
    EXPECT_EQ(e->shape, k.shape) << k.name << " is " << e->shape.str();
  }
  // The SD1 file has no shortcut where the tiny widths do not change.
  EXPECT_FALSE(f.contains("model.diffusion_model.input_blocks.7.0.skip_connection.weight"));
  EXPECT_TRUE(f.contains("model.diffusion_model.input_blocks.4.0.skip_connection.weight"));

  // position_ids loads as int64 0..76.
  auto ids = f.load("cond_stage_model.transformer.text_model.embeddings.position_ids");
  ASSERT_TRUE(ids.ok()) << ids.status().str();
  EXPECT_EQ(ids->dtype(), DType::I64);
  for (int i = 0; i < 77; ++i) EXPECT_EQ(static_cast<const int64_t*>(ids->data())[i], i);
  // A weight loads as f16 by default and as exact f32 on request.
  auto w16 = f.load("model.diffusion_model.input_blocks.0.0.weight");
  auto w32 = f.load("model.diffusion_model.input_blocks.0.0.weight", DType::F32);
  ASSERT_TRUE(w16.ok() && w32.ok());
  EXPECT_EQ(w16->dtype(), DType::F16);
  for (int64_t i = 0; i < w32->numel(); ++i)
    ASSERT_EQ(w32->f32()[i], f16_to_f32(static_cast<const uint16_t*>(w16->data())[i]));
}

}  // namespace
}  // namespace hr
