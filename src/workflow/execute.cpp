// Prompt execution in dependency order with the signature-keyed output cache.
#include "workflow/execute.h"

#include <functional>
#include <set>

namespace hr {

namespace {

// The node's class, or "" for a context outside a prompt (a node run on its own in a test).
std::string class_of(const Prompt& prompt, const std::string& node_id) {
  auto it = prompt.nodes.find(node_id);
  return it == prompt.nodes.end() ? std::string() : it->second.class_type;
}

}  // namespace

void ExecContext::progress(int value, int max) const {
  if (opts.on_event) {
    ExecEvent e{ExecEvent::Kind::PROGRESS, node_id, class_of(prompt, node_id), value, max, Json(),
                {}};
    opts.on_event(e);
  }
}

void ExecContext::preview(std::shared_ptr<const std::string> png) const {
  if (!opts.on_event) return;
  ExecEvent e{ExecEvent::Kind::PREVIEW, node_id, class_of(prompt, node_id), 0, 0, Json(), {}, {},
              std::move(png)};
  opts.on_event(e);
}

void ExecContext::memory_decision(const std::string& message) const {
  if (!opts.on_event || message == last_decision) return;
  last_decision = message;
  ExecEvent e{ExecEvent::Kind::MEMORY, node_id, class_of(prompt, node_id), 0, 0, Json(), {},
              message};
  opts.on_event(e);
}

void ExecContext::warn(const std::string& message) const {
  if (!opts.on_event) return;
  ExecEvent e{ExecEvent::Kind::WARNING, node_id, class_of(prompt, node_id), 0, 0, Json(), {},
              message};
  opts.on_event(e);
}

Status ExecContext::check_interrupt() const {
  if (interrupted()) return Status(ErrorCode::CANCELLED, "interrupted");
  return Status();
}

std::vector<std::string> PromptExecutor::execution_order(const Prompt& prompt) {
  std::vector<std::string> order;
  std::set<std::string> seen;
  std::function<void(const std::string&)> visit = [&](const std::string& id) {
    if (!seen.insert(id).second) return;
    const PromptNode& n = prompt.nodes.at(id);
    // Inputs in declaration order, so the order is deterministic and follows the node spec.
    for (const InputSpec& s : n.def->inputs) {
      if (!n.inputs.contains(s.name)) continue;
      const Json& v = n.inputs[s.name];
      if (json_is_link(v)) visit(v[0].get<std::string>());
    }
    order.push_back(id);
  };
  for (const std::string& out : prompt.outputs) visit(out);
  return order;
}

Result<ExecResult> PromptExecutor::execute(const Prompt& prompt, const ExecOptions& opts) {
  ExecResult result;
  std::vector<std::string> order = execution_order(prompt);
  std::map<std::string, std::string> sig;
  std::map<std::string, const std::vector<std::any>*> outputs;
  for (const std::string& id : order) {
    const PromptNode& n = prompt.nodes.at(id);
    // Note [node signature]: class + literal inputs + upstream signatures. Two runs with the
    // same signature produce the same outputs, so the cached outputs can be reused.
    std::string s = n.class_type + "|";
    for (const auto& [k, v] : n.inputs.items()) {
      if (json_is_link(v))
        s += k + "=<" + sig.at(v[0].get<std::string>()) + ">#" + std::to_string(v[1].get<int64_t>()) + ";";
      else
        s += k + "=" + v.dump() + ";";
    }
    sig[id] = s;
    auto it = cache_.find(id);
    if (it != cache_.end() && it->second.signature == s) {
      result.cached.push_back(id);
      outputs[id] = &it->second.outputs;
      if (n.def->output_node) result.ui_outputs[id] = it->second.ui;
      continue;
    }
  }
  if (opts.on_event && !result.cached.empty()) {
    ExecEvent e{ExecEvent::Kind::CACHED, "", "", 0, 0, Json(), result.cached};
    opts.on_event(e);
  }
  std::set<std::string> cached(result.cached.begin(), result.cached.end());
  for (const std::string& id : order) {
    if (cached.count(id)) continue;
    const PromptNode& n = prompt.nodes.at(id);
    if (opts.interrupt && opts.interrupt->load())
      return Status(ErrorCode::CANCELLED, fmt::format("interrupted before node {} ({})", id, n.class_type));
    if (opts.on_event) {
      ExecEvent e{ExecEvent::Kind::EXECUTING, id, n.class_type, 0, 0, Json(), {}};
      opts.on_event(e);
    }
    NodeInputs in;
    for (const auto& [k, v] : n.inputs.items()) {
      if (json_is_link(v)) {
        const std::vector<std::any>& up = *outputs.at(v[0].get<std::string>());
        size_t slot = size_t(v[1].get<int64_t>());
        if (slot >= up.size())
          return make_error(ErrorCode::INTERNAL, "node {} ({}): upstream output {} missing", id,
                            n.class_type, slot);
        in.links[k] = up[slot];
      } else {
        in.literals[k] = v;
      }
    }
    ExecContext ctx{opts, prompt, id, Json::object()};
    Result<std::vector<std::any>> r = n.def->run(ctx, in);
    if (!r.ok()) {
      cache_.erase(id);
      return r.status().with_context(fmt::format("node {} ({})", id, n.class_type));
    }
    CacheEntry& ce = cache_[id];
    ce.signature = sig[id];
    ce.outputs = std::move(r).value();
    ce.ui = ctx.ui;
    outputs[id] = &ce.outputs;
    result.executed.push_back(id);
    if (n.def->output_node) {
      result.ui_outputs[id] = ctx.ui;
      if (opts.on_event) {
        ExecEvent e{ExecEvent::Kind::EXECUTED, id, n.class_type, 0, 0, ctx.ui, {}};
        opts.on_event(e);
      }
    }
  }
  return result;
}

}  // namespace hr
