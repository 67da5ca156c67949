// One execution of an API workflow through the workflow layer for the end-to-end tests against
// ComfyUI (e2e_test.cpp, fp8_e2e_test.cpp): the nodes' outputs, the PNGs SaveImage wrote, and
// the lookups those tests share (a node by class, a node's output slot).
#pragma once

#include <gtest/gtest.h>

#include <any>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "backend/allocator.h"
#include "backend/backend.h"
#include "core/png_io.h"
#include "graph/executor.h"
#include "memory/eviction.h"
#include "memory/executor_policies.h"
#include "workflow/execute.h"
#include "workflow/prompt.h"

namespace hr::test {

// The id of the (only) node of a class in a workflow.
inline std::string node_of(const nlohmann::json& wf, const std::string& class_type) {
  for (auto it = wf.begin(); it != wf.end(); ++it)
    if (it.value()["class_type"] == class_type) return it.key();
  ADD_FAILURE() << "no " << class_type << " node";
  return "";
}

template <class T>
std::shared_ptr<const T> output_of(const PromptExecutor& pe, const std::string& id, size_t slot) {
  const std::vector<std::any>* outs = pe.node_outputs(id);
  if (!outs || outs->size() <= slot) return nullptr;
  return std::any_cast<std::shared_ptr<const T>>((*outs)[slot]);
}

// One execution of a workflow on a backend: what its nodes produced (in `pe`) and the UI
// outputs naming the PNGs SaveImage wrote under `output_dir`.
struct CaseRun {
  CaseRun(Backend& b, std::filesystem::path out)
      : backend(b),
        alloc(b, Allocator::kUnlimited, eviction_policy()),
        ex(b, alloc, executor_policies_default(b)),
        output_dir(std::move(out)) {}

  Status execute(const Prompt& prompt, const std::filesystem::path& models, DType dtype) {
    ExecOptions o;
    o.models_dir = models.string();
    o.output_dir = output_dir.string();
    o.backend = &backend;
    o.allocator = &alloc;
    o.executor = &ex;
    o.compute_dtype = dtype;
    o.unet_weights = unet_weights;
    o.text_encoder_weights = text_encoder_weights;
    Result<ExecResult> r = pe.execute(prompt, o);
    if (!r.ok()) return r.status();
    ui = r->ui_outputs;
    return Status();
  }
  // The i-th PNG the SaveImage node `id` wrote, or an empty image.
  Image8 png(const std::string& id, size_t i) const {
    auto it = ui.find(id);
    if (it == ui.end() || it->second["images"].size() <= i) return Image8{};
    auto img =
        png_read((output_dir / it->second["images"][i]["filename"].get<std::string>()).string());
    return img.ok() ? std::move(img).value() : Image8{};
  }

  Backend& backend;
  Allocator alloc;
  Executor ex;
  PromptExecutor pe;
  std::filesystem::path output_dir;
  std::map<std::string, Json> ui;
  // Models stored in fp8 at load (ComfyUI's --fp8_e4m3fn-unet / --fp8_e4m3fn-text-enc).
  std::optional<DType> unet_weights, text_encoder_weights;
};

}  // namespace hr::test
