// path_confine and output_target_make: absolute paths, '..' that leaves, symlinks out are
// refused (with ComfyUI's text for outputs); plain subfolders and links that stay inside are not.
#include "core/path_confine.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <fstream>

namespace hr {
namespace {

namespace fs = std::filesystem;

class PathConfine : public ::testing::Test {
 protected:
  void SetUp() override {
    static std::atomic<int> counter{0};
    dir_ = fs::temp_directory_path() / fmt::format("hr_confine_{}_{}", ::getpid(), counter++);
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "out/sub");
    fs::create_directories(dir_ / "elsewhere");
    fs::create_symlink(dir_ / "elsewhere", dir_ / "out/link_out");
    fs::create_symlink(dir_ / "out/sub", dir_ / "out/link_in");
    out_ = (dir_ / "out").string();
  }
  void TearDown() override { fs::remove_all(dir_); }

  // The refusal of `prefix`, "" when it was accepted.
  std::string refusal(const std::string& prefix) {
    Result<OutputTarget> t = output_target_make(out_, prefix);
    return t.ok() ? "" : t.status().message();
  }

  fs::path dir_;
  std::string out_;
};

TEST_F(PathConfine, PlainSubfoldersAndTheRootAreInside) {
  Result<fs::path> p = path_confine(out_, "sub/a.png");
  ASSERT_TRUE(p.ok()) << p.status().str();
  EXPECT_EQ(*p, fs::canonical(dir_ / "out/sub") / "a.png");
  EXPECT_TRUE(path_confine(out_, "new/deeper/a.png").ok());  // need not exist
  EXPECT_TRUE(path_confine(out_, "").ok());
  EXPECT_TRUE(path_confine(out_, "sub/../a.png").ok());  // '..' that stays inside
}

TEST_F(PathConfine, AbsoluteDotDotAndLinksOutAreRefused) {
  for (const char* bad : {"/etc/passwd", "/", "../a.png", "sub/../../a.png", "..", "link_out/a.png",
                          "link_out", "link_in/../../a.png"}) {
    Result<fs::path> p = path_confine(out_, bad);
    ASSERT_FALSE(p.ok()) << bad << " -> " << p->string();
    EXPECT_EQ(p.status().code(), ErrorCode::INVALID_ARGUMENT) << bad;
  }
  EXPECT_FALSE(path_confine(out_, std::string("a\0b", 3)).ok());
}

TEST_F(PathConfine, LinksThatStayInsideAreAllowed) {
  Result<fs::path> p = path_confine(out_, "link_in/a.png");
  ASSERT_TRUE(p.ok()) << p.status().str();
  EXPECT_EQ(*p, fs::canonical(dir_ / "out/sub") / "a.png");
}

TEST_F(PathConfine, ClientPathsNameThePartAtFault) {
  EXPECT_TRUE(path_confined(out_, "sub", "a.png").ok());
  EXPECT_FALSE(path_confined(out_, "", "").ok());
  EXPECT_NE(path_confined(out_, "/etc", "passwd").status().message().find("subfolder"),
            std::string::npos);
  EXPECT_NE(path_confined(out_, "", "../a.png").status().message().find("filename"),
            std::string::npos);
  EXPECT_FALSE(path_confined(out_, "link_out", "a.png").ok());
}

TEST_F(PathConfine, OutputTargetsFollowComfyUIsPrefixSplit) {
  Result<OutputTarget> t = output_target_make(out_, "new/dir/name");
  ASSERT_TRUE(t.ok()) << t.status().str();
  EXPECT_EQ(t->folder, fs::canonical(dir_ / "out/new/dir"));
  EXPECT_EQ(t->base, "name");
  EXPECT_EQ(t->subfolder, "new/dir");
  t = output_target_make(out_, "ComfyUI");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->subfolder, "");
  EXPECT_EQ(t->base, "ComfyUI");
  t = output_target_make(out_, "sub/");  // os.path.normpath drops the trailing '/'
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->subfolder, "");
  EXPECT_EQ(t->base, "sub");
  t = output_target_make(out_, "link_in/x");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->subfolder, "sub");
}

TEST_F(PathConfine, OutputTargetsOutsideAreRefusedWithComfyUIsText) {
  const fs::path abs = dir_ / "abs_target";
  for (const std::string& bad :
       {abs.string() + "/x", std::string("../../x"), std::string("sub/../../x"),
        std::string("link_out/x"), std::string("link_out/deeper/x"), std::string("/x")}) {
    const std::string why = refusal(bad);
    EXPECT_EQ(why.rfind(kOutsideOutputFolder, 0), 0u) << bad << ": " << why;
    EXPECT_NE(why.find("'" + bad + "'"), std::string::npos) << why;
  }
  EXPECT_FALSE(fs::exists(abs));
  EXPECT_FALSE(fs::exists(dir_ / "x"));
  EXPECT_TRUE(fs::is_empty(dir_ / "elsewhere")) << "nothing created through the link";
}

}  // namespace
}  // namespace hr
