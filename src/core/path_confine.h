// Paths that prompts and clients name under a root folder (output, input, temp, the web root),
// resolved so that they stay there: no absolute path, no '..' and no symlink that leads out.
#pragma once

#include <filesystem>
#include <string>

#include "core/status.h"

namespace hr {

// `root`/`relative` resolved through every symlink on its existing part (Note [confined
// paths]); `relative` need not exist, and may be empty (the root itself). INVALID_ARGUMENT when
// it is absolute, holds a NUL byte, or lands outside `root` (by '..' or by a symlink); IO when
// `root` cannot be resolved.
Result<std::filesystem::path> path_confine(const std::string& root, const std::string& relative);

// `root`/`subfolder`/`filename` as a client names a file (/view, /upload/image, /upload/mask):
// path_confine with a filename required, the part at fault named in the message.
Result<std::filesystem::path> path_confined(const std::string& root, const std::string& subfolder,
                                            const std::string& filename);

// ComfyUI's refusal (folder_paths.get_save_image_path), which starts every message of
// output_target_make.
inline constexpr char kOutsideOutputFolder[] =
    "Saving image outside the output folder is not allowed.";

// Where the files a node names by a prefix go (ComfyUI's filename_prefix, "sub/dir/name").
struct OutputTarget {
  std::filesystem::path folder;  // resolved, inside the root, created
  std::string base;              // the file names' start ("name" of "name_00001_.png")
  std::string subfolder;         // `folder` under the root, '/'-separated; "" for the root
};

// The folder of `prefix` under `root`, confined by path_confine and created; a refusal is
// INVALID_ARGUMENT with kOutsideOutputFolder, the prefix and why. Every node that writes files
// (SaveImage, PreviewImage and any later one) takes its paths from here.
Result<OutputTarget> output_target_make(const std::string& root, const std::string& prefix);
// output_target_make's checks and refusals without creating anything (a memory plan's run of a
// writing node, Note [plan run] in workflow/workflow_plan.cpp).
Status output_target_check(const std::string& root, const std::string& prefix);

}  // namespace hr
