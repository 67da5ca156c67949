// Model folders (models/model_paths.h): listing and lookup under symlink names, ComfyUI's
// folder aliases, extra_model_paths.yaml, and a workflow naming a symlinked checkpoint.
#include "models/model_paths.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "models/safetensors.h"
#include "nodes/nodes.h"
#include "test_paths.h"
#include "workflow/prompt.h"

namespace hr {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

class ModelPathsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const ::testing::TestInfo* t = ::testing::UnitTest::GetInstance()->current_test_info();
    root_ = fs::temp_directory_path() /
            ("headroom_model_paths_" + std::to_string(getpid()) + "_" + t->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  // A small file standing for a model (listing and lookup never read it).
  void touch(const fs::path& p) {
    fs::create_directories(p.parent_path());
    std::ofstream(p) << "x";
  }
  fs::path write_yaml(const std::string& rel, const std::string& text) {
    fs::path p = root_ / rel;
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
    return p;
  }
  std::string models() const { return (root_ / "models").string(); }

  fs::path root_;
};

using Names = std::vector<std::string>;

TEST_F(ModelPathsTest, SymlinkedFileIsListedAndFoundUnderItsLinkName) {
  touch(root_ / "store/v1-5-pruned.safetensors");
  fs::create_directories(root_ / "models/checkpoints");
  fs::create_symlink(root_ / "store/v1-5-pruned.safetensors",
                     root_ / "models/checkpoints/sd15.safetensors");
  ModelPaths mp = ModelPaths::from_models_dir(models());
  EXPECT_EQ(mp.files("checkpoints"), Names{"sd15.safetensors"});
  Result<std::string> p = mp.file_path("checkpoints", "sd15.safetensors");
  ASSERT_TRUE(p.ok()) << p.status().str();
  EXPECT_EQ(fs::path(*p), root_ / "models/checkpoints/sd15.safetensors");
  // The target's own name is not a model name here.
  EXPECT_EQ(mp.file_path("checkpoints", "v1-5-pruned.safetensors").status().code(),
            ErrorCode::NOT_FOUND);
}

TEST_F(ModelPathsTest, SymlinkedFolderIsListedAndLoadedUnderItsLinkName) {
  // A real checkpoint behind a linked folder: the file opens through the link's path.
  fs::create_directories(root_ / "store/sd");
  fs::create_symlink(test::golden_path("tiny-sd1.safetensors"),
                     root_ / "store/sd/tiny.safetensors");
  touch(root_ / "store/sd/nested/other.sft");
  touch(root_ / "models/checkpoints/plain.safetensors");
  fs::create_symlink(root_ / "store/sd", root_ / "models/checkpoints/shared");
  ModelPaths mp = ModelPaths::from_models_dir(models());
  EXPECT_EQ(mp.files("checkpoints"),
            (Names{"plain.safetensors", "shared/nested/other.sft", "shared/tiny.safetensors"}));
  Result<std::string> p = mp.file_path("checkpoints", "shared/tiny.safetensors");
  ASSERT_TRUE(p.ok()) << p.status().str();
  EXPECT_EQ(fs::path(*p), root_ / "models/checkpoints/shared/tiny.safetensors");
  Result<std::unique_ptr<SafetensorsFile>> f = SafetensorsFile::open(*p);
  ASSERT_TRUE(f.ok()) << f.status().str();
  EXPECT_FALSE((*f)->entries().empty());
}

TEST_F(ModelPathsTest, BrokenLinksAreSkippedAndLinkLoopsEnd) {
  touch(root_ / "models/checkpoints/sub/a.safetensors");
  fs::create_symlink(root_ / "nowhere.safetensors", root_ / "models/checkpoints/gone.safetensors");
  fs::create_symlink(root_ / "models/checkpoints", root_ / "models/checkpoints/sub/back");
  fs::create_symlink(root_ / "models/checkpoints/sub", root_ / "models/checkpoints/sub/self");
  touch(root_ / "models/checkpoints/.git/objects/x.safetensors");
  touch(root_ / "models/checkpoints/notes.txt");
  touch(root_ / "models/checkpoints/old.ckpt");
  touch(root_ / "models/checkpoints/UPPER.SAFETENSORS");
  ModelPaths mp = ModelPaths::from_models_dir(models());
  EXPECT_EQ(mp.files("checkpoints"), (Names{"UPPER.SAFETENSORS", "sub/a.safetensors"}));
  Result<std::string> p = mp.file_path("checkpoints", "gone.safetensors");
  EXPECT_EQ(p.status().code(), ErrorCode::NOT_FOUND);
  EXPECT_NE(p.status().message().find("broken link"), std::string::npos) << p.status().str();
}

TEST_F(ModelPathsTest, NamesStayInsideTheirFolder) {
  touch(root_ / "models/checkpoints/a..b.safetensors");
  touch(root_ / "models/secret.safetensors");
  ModelPaths mp = ModelPaths::from_models_dir(models());
  EXPECT_TRUE(mp.file_path("checkpoints", "a..b.safetensors").ok());
  EXPECT_EQ(mp.file_path("checkpoints", "../secret.safetensors").status().code(),
            ErrorCode::INVALID_ARGUMENT);
  EXPECT_EQ(mp.file_path("checkpoints", "sub/../../secret.safetensors").status().code(),
            ErrorCode::INVALID_ARGUMENT);
  EXPECT_EQ(
      mp.file_path("checkpoints", (root_ / "models/secret.safetensors").string()).status().code(),
      ErrorCode::INVALID_ARGUMENT);
  EXPECT_EQ(mp.file_path("checkpoints", "").status().code(), ErrorCode::INVALID_ARGUMENT);
  EXPECT_EQ(mp.file_path("no_such_folder", "x.safetensors").status().code(), ErrorCode::NOT_FOUND);
}

TEST_F(ModelPathsTest, LegacyFolderNamesAreAliases) {
  touch(root_ / "models/unet/u1.safetensors");
  touch(root_ / "models/diffusion_models/u2.safetensors");
  touch(root_ / "models/clip/c1.safetensors");
  touch(root_ / "models/text_encoders/c2.safetensors");
  ModelPaths mp = ModelPaths::from_models_dir(models());
  EXPECT_EQ(mp.files("diffusion_models"), (Names{"u1.safetensors", "u2.safetensors"}));
  EXPECT_EQ(mp.files("unet"), mp.files("diffusion_models"));
  EXPECT_EQ(mp.files("text_encoders"), (Names{"c1.safetensors", "c2.safetensors"}));
  EXPECT_EQ(mp.files("clip"), mp.files("text_encoders"));
  EXPECT_TRUE(mp.file_path("unet", "u2.safetensors").ok());
  EXPECT_TRUE(mp.file_path("text_encoders", "c1.safetensors").ok());
  // A directory added under the old name is searched under the new one, and the reverse.
  mp.add_folder_path("clip", (root_ / "more_te").string());
  mp.add_folder_path("diffusion_models", (root_ / "more_unet").string());
  touch(root_ / "more_te/c3.safetensors");
  touch(root_ / "more_unet/u3.safetensors");
  EXPECT_EQ(mp.folder_dirs("text_encoders").back(), (root_ / "more_te").string());
  EXPECT_EQ(mp.files("text_encoders").size(), 3u);
  EXPECT_TRUE(mp.file_path("unet", "u3.safetensors").ok());
  EXPECT_EQ(mp.folders().count("clip"), 0u);
  EXPECT_EQ(mp.folders().count("unet"), 0u);
}

TEST_F(ModelPathsTest, ExtraModelPathsYaml) {
  // Two sections: one with a base_path relative to the YAML file's folder and is_default,
  // one with a `|` block of paths and an alias key; a third without base_path.
  fs::path yaml = write_yaml("conf/extra_model_paths.yaml", R"(
comfyui:
  base_path: ../comfy
  is_default: true
  checkpoints: models/checkpoints/
  clip: models/clip

a111:
  base_path: )" + (root_ / "webui").string() + R"(
  checkpoints: |
    models/Stable-diffusion
    models/more

  vae: models/VAE
  text_encoders: |
    enc

local:
  checkpoints: local_ckpts
empty_section:
)");
  touch(root_ / "comfy/models/checkpoints/c.safetensors");
  touch(root_ / "comfy/models/clip/te.safetensors");
  touch(root_ / "webui/models/Stable-diffusion/sd.safetensors");
  touch(root_ / "webui/models/more/deep/m.safetensors");
  touch(root_ / "webui/models/VAE/v.safetensors");
  touch(root_ / "webui/enc/t5.safetensors");
  touch(root_ / "conf/local_ckpts/l.safetensors");
  touch(root_ / "models/checkpoints/base.safetensors");
  ModelPaths mp = ModelPaths::from_models_dir(models());
  Status st = mp.add_config_file(yaml.string());
  ASSERT_TRUE(st.ok()) << st.str();
  // is_default puts its folder first; the others follow the models folder in file order.
  EXPECT_EQ(
      mp.folder_dirs("checkpoints"),
      (Names{(root_ / "comfy/models/checkpoints").string(), (root_ / "models/checkpoints").string(),
             (root_ / "webui/models/Stable-diffusion").string(),
             (root_ / "webui/models/more").string(), (root_ / "conf/local_ckpts").string()}));
  EXPECT_EQ(mp.files("checkpoints"),
            (Names{"base.safetensors", "c.safetensors", "deep/m.safetensors", "l.safetensors",
                   "sd.safetensors"}));
  EXPECT_EQ(mp.files("vae"), Names{"v.safetensors"});
  // "clip" in the YAML lands in text_encoders, beside "text_encoders" itself.
  EXPECT_EQ(mp.files("text_encoders"), (Names{"t5.safetensors", "te.safetensors"}));
  Result<std::string> p = mp.file_path("checkpoints", "deep/m.safetensors");
  ASSERT_TRUE(p.ok()) << p.status().str();
  EXPECT_EQ(fs::path(*p), root_ / "webui/models/more/deep/m.safetensors");
  // A second file adds to the same lists; the same directory is not added twice.
  fs::path second =
      write_yaml("second.yaml", "again:\n  base_path: comfy\n  checkpoints: models/checkpoints\n");
  ASSERT_TRUE(mp.add_config_file(second.string()).ok());
  EXPECT_EQ(mp.folder_dirs("checkpoints").size(), 5u);
}

TEST_F(ModelPathsTest, ExtraModelPathsBasePathExpandsHome) {
  const char* old = std::getenv("HOME");
  std::string saved = old ? old : "";
  setenv("HOME", root_.c_str(), 1);
  touch(root_ / "ai/ckpt/h.safetensors");
  ModelPaths mp = ModelPaths::from_models_dir(models());
  Status st = mp.add_config_text("home:\n  base_path: ~/ai\n  checkpoints: ckpt\n",
                                 (root_ / "elsewhere").string(), "inline.yaml");
  if (old)
    setenv("HOME", saved.c_str(), 1);
  else
    unsetenv("HOME");
  ASSERT_TRUE(st.ok()) << st.str();
  EXPECT_EQ(mp.files("checkpoints"), Names{"h.safetensors"});
}

TEST_F(ModelPathsTest, MalformedYamlGivesAClearError) {
  struct Case {
    std::string text, needle;
  };
  std::vector<Case> cases = {
      {"a:\n  checkpoints: [unclosed\n", "not valid YAML"},
      {"- just\n- a list\n", "mapping of sections"},
      {"sec: just a string\n", "section 'sec'"},
      {"sec:\n  checkpoints:\n    - a\n    - b\n", "section 'sec', key 'checkpoints'"},
      {"sec:\n  vae: {x: 1}\n", "key 'vae'"},
      {"sec:\n  is_default: maybe\n  vae: v\n", "key 'is_default'"},
      {"sec:\n  base_path: [a]\n  vae: v\n", "key 'base_path'"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    fs::path yaml = write_yaml("bad" + std::to_string(i) + ".yaml", cases[i].text);
    ModelPaths mp = ModelPaths::from_models_dir(models());
    Names before = mp.folder_dirs("vae");
    Status st = mp.add_config_file(yaml.string());
    EXPECT_EQ(st.code(), ErrorCode::INVALID_ARGUMENT) << cases[i].text;
    EXPECT_NE(st.message().find(yaml.string()), std::string::npos) << st.message();
    EXPECT_NE(st.message().find(cases[i].needle), std::string::npos) << st.message();
    EXPECT_EQ(mp.folder_dirs("vae"), before) << "a failed file adds nothing";
  }
  Result<ModelPaths> missing =
      ModelPaths::from_config(models(), {(root_ / "absent.yaml").string()});
  EXPECT_EQ(missing.status().code(), ErrorCode::NOT_FOUND);
  EXPECT_NE(missing.status().message().find("absent.yaml"), std::string::npos);
  // An empty file is no error.
  fs::path empty = write_yaml("empty.yaml", "");
  EXPECT_TRUE(ModelPaths::from_config(models(), {empty.string()}).ok());
}

TEST_F(ModelPathsTest, WorkflowNamingSymlinkedCheckpointValidates) {
  fs::create_directories(root_ / "models/checkpoints");
  fs::create_symlink(test::golden_path("tiny-sd1.safetensors"),
                     root_ / "models/checkpoints/linked-sd1.safetensors");
  std::ifstream f(test::source_dir() + "/examples/default_workflow.json");
  Json wf = Json::parse(f);
  wf["4"]["inputs"]["ckpt_name"] = "linked-sd1.safetensors";
  auto paths = std::make_shared<const ModelPaths>(ModelPaths::from_models_dir(models()));
  NodeRegistry reg;
  nodes_register(reg, NodeEnv{models(), (root_ / "input").string(), paths});
  PromptValidation v = prompt_validate(wf, reg);
  EXPECT_TRUE(v.ok) << v.summary();
  // The resolved file's own name is not offered.
  wf["4"]["inputs"]["ckpt_name"] = "tiny-sd1.safetensors";
  EXPECT_FALSE(prompt_validate(wf, reg).ok);
}

}  // namespace
}  // namespace hr
