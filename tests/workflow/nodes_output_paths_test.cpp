// Every registered node that writes files (an output node, or one taking a filename_prefix) is
// run with hostile prefixes: each run is refused with ComfyUI's text and nothing is written
// outside the output and temp folders (core/path_confine.h).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <set>

#include "core/path_confine.h"
#include "node_harness.h"

namespace hr {
namespace {

namespace fs = std::filesystem;

// What a node needs to run without models: pictures, masks, latents and widget defaults.
Result<NodeInputs> inputs_for(const NodeDef& def) {
  NodeInputs in;
  const HostTensor px(DType::F32, Shape{1, 8, 8, 3});
  for (const InputSpec& s : def.inputs) {
    switch (s.type) {
      case IoType::IMAGE:
        in.links[s.name] = test::image_value(px);
        break;
      case IoType::LATENT:
        in.links[s.name] = test::latent_value(HostTensor(DType::F32, Shape{1, 4, 1, 1}));
        break;
      case IoType::MASK:
        in.links[s.name] = std::make_shared<const MaskValue>(
            MaskValue{std::make_shared<const HostTensor>(HostTensor(DType::F32, Shape{1, 8, 8}))});
        break;
      case IoType::INT:
      case IoType::FLOAT:
        in.literals[s.name] = s.default_number;
        break;
      case IoType::STRING:
        in.literals[s.name] = s.default_string;
        break;
      case IoType::BOOLEAN:
        in.literals[s.name] = s.default_bool;
        break;
      case IoType::COMBO:
        in.literals[s.name] = s.combo_options().empty() ? "" : s.combo_options()[0];
        break;
      default:
        return make_error(ErrorCode::UNSUPPORTED, "{} needs a {} input; give this test one",
                          def.class_type, io_type_name(s.type));
    }
  }
  return in;
}

class NodesOutputPaths : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("hr_outpaths_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    jail_ = dir_ / "a/b";
    for (const char* d : {"output", "temp", "input"}) fs::create_directories(jail_ / d);
    fs::create_directories(dir_ / "elsewhere");
    fs::create_symlink(dir_ / "elsewhere", jail_ / "output/link_out");
    fs::create_symlink(dir_ / "elsewhere", jail_ / "temp/link_out");
    opts_.output_dir = (jail_ / "output").string();
    opts_.temp_dir = (jail_ / "temp").string();
    opts_.input_dir = (jail_ / "input").string();
    NodeEnv env;
    env.input_dir = opts_.input_dir;
    nodes_register(registry_, env);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Nodes that write files, by what they declare (not by a list kept here).
  std::vector<const NodeDef*> writers() const {
    std::vector<const NodeDef*> out;
    for (const std::string& c : registry_.class_types()) {
      const NodeDef* d = registry_.find(c);
      if (d->output_node || d->input("filename_prefix")) out.push_back(d);
    }
    return out;
  }

  Result<std::vector<std::any>> run(const NodeDef& def, const NodeInputs& in) {
    ExecContext ctx{opts_, prompt_, "1"};
    return def.run(ctx, in);
  }

  // Every file under dir_ (links not followed) that is not inside the output or temp folder.
  std::vector<std::string> files_outside() const {
    std::vector<std::string> out;
    for (auto it = fs::recursive_directory_iterator(dir_); it != fs::recursive_directory_iterator();
         ++it) {
      if (it->is_symlink() || !it->is_regular_file()) continue;
      const fs::path rel = it->path().lexically_relative(jail_);
      const std::string top = rel.empty() ? "" : rel.begin()->string();
      if (top != "output" && top != "temp") out.push_back(it->path().string());
    }
    return out;
  }

  fs::path dir_, jail_;
  ExecOptions opts_;
  NodeRegistry registry_;
  Prompt prompt_;
};

TEST_F(NodesOutputPaths, HostilePrefixesAreRefusedAndWriteNothingOutside) {
  const std::vector<const NodeDef*> nodes = writers();
  std::set<std::string> names;
  for (const NodeDef* d : nodes) names.insert(d->class_type);
  EXPECT_TRUE(names.count("SaveImage") && names.count("PreviewImage")) << "writers not found";
  const std::vector<std::string> hostile = {(dir_ / "abs/evil").string(),
                                            "/evil",
                                            "../../evil",
                                            "../evil",
                                            "sub/../../evil",
                                            "link_out/evil",
                                            "link_out/deeper/evil"};
  for (const NodeDef* d : nodes) {
    Result<NodeInputs> in = inputs_for(*d);
    ASSERT_TRUE(in.ok()) << in.status().str();
    if (!d->input("filename_prefix")) {  // its own names, under its own folder
      Result<std::vector<std::any>> r = run(*d, *in);
      EXPECT_TRUE(r.ok()) << d->class_type << ": " << r.status().str();
      continue;
    }
    for (const std::string& prefix : hostile) {
      in->literals["filename_prefix"] = prefix;
      Result<std::vector<std::any>> r = run(*d, *in);
      ASSERT_FALSE(r.ok()) << d->class_type << " wrote with filename_prefix " << prefix;
      EXPECT_EQ(r.status().message().rfind(kOutsideOutputFolder, 0), 0u) << r.status().message();
      EXPECT_NE(r.status().message().find(prefix), std::string::npos) << r.status().message();
    }
  }
  EXPECT_EQ(files_outside(), std::vector<std::string>());
  EXPECT_TRUE(fs::is_empty(dir_ / "elsewhere"));
  EXPECT_FALSE(fs::exists(dir_ / "abs"));
}

// The same nodes with ordinary prefixes write where ComfyUI would, links inside included.
TEST_F(NodesOutputPaths, PrefixesInsideTheFolderWrite) {
  fs::create_symlink(jail_ / "output/real", jail_ / "output/link_in");
  fs::create_directories(jail_ / "output/real");
  const NodeDef* save = registry_.find("SaveImage");
  ASSERT_TRUE(save);
  Result<NodeInputs> in = inputs_for(*save);
  ASSERT_TRUE(in.ok());
  for (const char* prefix : {"plain", "sub/dir/x", "sub/../y", "link_in/z"}) {
    in->literals["filename_prefix"] = prefix;
    Result<std::vector<std::any>> r = run(*save, *in);
    EXPECT_TRUE(r.ok()) << prefix << ": " << r.status().str();
  }
  for (const char* f :
       {"plain_00001_.png", "sub/dir/x_00001_.png", "y_00001_.png", "real/z_00001_.png"})
    EXPECT_TRUE(fs::is_regular_file(jail_ / "output" / f)) << f;
  EXPECT_EQ(files_outside(), std::vector<std::string>());
}

}  // namespace
}  // namespace hr
