// Validation with ComfyUI's error structure, execution order and the output cache, on a
// registry of small test nodes (the real nodes are tested end to end in tests/cli).
#include <gtest/gtest.h>

#include "workflow/execute.h"
#include "workflow/prompt.h"

namespace hr {
namespace {

struct Counter {
  std::map<std::string, int> runs;
};

NodeRegistry test_registry(Counter* counter) {
  NodeRegistry reg;
  NodeDef num;
  num.class_type = "Number";
  InputSpec v{.name = "value", .type = IoType::INT};
  v.min = -100;
  v.max = 100;
  num.inputs = {v};
  num.outputs = {{IoType::LATENT, "LATENT"}};
  num.run = [counter](ExecContext& ctx, const NodeInputs& in) -> Result<std::vector<std::any>> {
    counter->runs[ctx.node_id]++;
    return std::vector<std::any>{std::any(in.get_int("value"))};
  };
  reg.add(num);

  NodeDef add;
  add.class_type = "Add";
  add.inputs = {InputSpec{.name = "a", .type = IoType::LATENT},
                InputSpec{.name = "b", .type = IoType::LATENT}};
  add.outputs = {{IoType::LATENT, "LATENT"}};
  add.run = [counter](ExecContext& ctx, const NodeInputs& in) -> Result<std::vector<std::any>> {
    counter->runs[ctx.node_id]++;
    return std::vector<std::any>{std::any(*in.get<int64_t>("a") + *in.get<int64_t>("b"))};
  };
  reg.add(add);

  NodeDef pick;
  pick.class_type = "Pick";
  InputSpec mode{.name = "mode", .type = IoType::COMBO};
  mode.options = {"first", "second"};
  InputSpec scale{.name = "scale", .type = IoType::FLOAT};
  scale.min = 0.0;
  scale.max = 10.0;
  scale.default_number = 1.0;
  InputSpec label{.name = "label", .type = IoType::STRING, .required = false};
  pick.inputs = {InputSpec{.name = "x", .type = IoType::LATENT}, mode, scale, label};
  pick.outputs = {{IoType::IMAGE, "IMAGE"}};
  pick.run = [counter](ExecContext& ctx, const NodeInputs& in) -> Result<std::vector<std::any>> {
    counter->runs[ctx.node_id]++;
    return std::vector<std::any>{std::any(double(*in.get<int64_t>("x")) * in.get_float("scale"))};
  };
  reg.add(pick);

  NodeDef out;
  out.class_type = "Output";
  out.output_node = true;
  out.inputs = {InputSpec{.name = "images", .type = IoType::IMAGE}};
  out.run = [counter](ExecContext& ctx, const NodeInputs& in) -> Result<std::vector<std::any>> {
    counter->runs[ctx.node_id]++;
    ctx.ui = Json{{"value", *in.get<double>("images")}};
    return std::vector<std::any>{};
  };
  reg.add(out);
  return reg;
}

Json good_prompt() {
  return Json::parse(R"({
    "1": {"class_type": "Number", "inputs": {"value": 3}},
    "2": {"class_type": "Number", "inputs": {"value": "4"}},
    "3": {"class_type": "Add", "inputs": {"a": ["1", 0], "b": ["2", 0]}},
    "4": {"class_type": "Pick", "inputs": {"x": ["3", 0], "mode": "first", "scale": 2}},
    "5": {"class_type": "Output", "inputs": {"images": ["4", 0]}},
    "9": {"class_type": "Number", "inputs": {"value": 1}}
  })");
}

// Returns node_errors[id].errors[0] of a failed validation.
Json first_error(const PromptValidation& v, const std::string& id) {
  EXPECT_FALSE(v.ok);
  EXPECT_EQ(v.error["error"]["type"], "prompt_outputs_failed_validation") << v.error.dump(2);
  EXPECT_TRUE(v.error["node_errors"].contains(id)) << v.error.dump(2);
  return v.error["node_errors"][id]["errors"][0];
}

TEST(PromptValidate, AcceptsGoodPromptAndConvertsLiterals) {
  Counter c;
  NodeRegistry reg = test_registry(&c);
  PromptValidation v = prompt_validate(good_prompt(), reg);
  ASSERT_TRUE(v.ok) << v.error.dump(2);
  EXPECT_EQ(v.prompt.outputs, std::vector<std::string>{"5"});
  EXPECT_EQ(v.prompt.nodes.at("2").inputs["value"], 4);  // "4" converted as int("4")
  EXPECT_TRUE(v.prompt.nodes.at("4").inputs["scale"].is_number_float());
}

TEST(PromptValidate, NotJson) {
  Counter c;
  PromptValidation v = prompt_validate_text("{not json", test_registry(&c));
  EXPECT_FALSE(v.ok);
  EXPECT_EQ(v.error["error"]["type"], "invalid_prompt");
}

TEST(PromptValidate, UnknownClassType) {
  Counter c;
  Json p = good_prompt();
  p["1"]["class_type"] = "NoSuchNode";
  PromptValidation v = prompt_validate(p, test_registry(&c));
  EXPECT_EQ(v.error["error"]["type"], "invalid_prompt");
  EXPECT_EQ(v.error["error"]["message"],
            "Cannot execute because node NoSuchNode does not exist.");
  EXPECT_EQ(v.error["error"]["details"], "Node ID '#1'");
}

TEST(PromptValidate, MissingClassType) {
  Counter c;
  Json p = good_prompt();
  p["1"].erase("class_type");
  PromptValidation v = prompt_validate(p, test_registry(&c));
  EXPECT_EQ(v.error["error"]["type"], "invalid_prompt");
}

TEST(PromptValidate, NoOutputs) {
  Counter c;
  Json p = good_prompt();
  p.erase("5");
  PromptValidation v = prompt_validate(p, test_registry(&c));
  EXPECT_EQ(v.error, Json::parse(R"({"error": {"type": "prompt_no_outputs",
      "message": "Prompt has no outputs", "details": "", "extra_info": {}}, "node_errors": {}})"));
}

TEST(PromptValidate, RequiredInputMissing) {
  Counter c;
  Json p = good_prompt();
  p["3"]["inputs"].erase("b");
  PromptValidation v = prompt_validate(p, test_registry(&c));
  Json e = first_error(v, "3");
  EXPECT_EQ(e, Json::parse(R"({"type": "required_input_missing", "message":
      "Required input is missing", "details": "b", "extra_info": {"input_name": "b"}})"));
  EXPECT_EQ(v.error["node_errors"]["3"]["dependent_outputs"], Json::array({"5"}));
  EXPECT_EQ(v.error["node_errors"]["3"]["class_type"], "Add");
}

TEST(PromptValidate, BadLinkedInput) {
  Counter c;
  Json p = good_prompt();
  p["3"]["inputs"]["a"] = Json::array({"1", 0, 7});
  Json e = first_error(prompt_validate(p, test_registry(&c)), "3");
  EXPECT_EQ(e["type"], "bad_linked_input");
  EXPECT_EQ(e["extra_info"]["input_name"], "a");
}

TEST(PromptValidate, LinkToMissingNodeAndWrongOutputIndex) {
  Counter c;
  Json p = good_prompt();
  p["3"]["inputs"]["a"] = Json::array({"77", 0});
  Json e = first_error(prompt_validate(p, test_registry(&c)), "3");
  EXPECT_EQ(e["type"], "bad_linked_input");
  EXPECT_NE(e["details"].get<std::string>().find("77"), std::string::npos);
  p = good_prompt();
  p["3"]["inputs"]["a"] = Json::array({"1", 3});
  e = first_error(prompt_validate(p, test_registry(&c)), "3");
  EXPECT_EQ(e["type"], "bad_linked_input");
  EXPECT_NE(e["details"].get<std::string>().find("index 3"), std::string::npos);
}

TEST(PromptValidate, ReturnTypeMismatch) {
  Counter c;
  Json p = good_prompt();
  p["5"]["inputs"]["images"] = Json::array({"3", 0});  // LATENT into IMAGE
  Json e = first_error(prompt_validate(p, test_registry(&c)), "5");
  EXPECT_EQ(e["type"], "return_type_mismatch");
  EXPECT_EQ(e["details"], "images, received_type(LATENT) mismatch input_type(IMAGE)");
  EXPECT_EQ(e["extra_info"]["received_type"], "LATENT");
}

TEST(PromptValidate, InvalidInputType) {
  Counter c;
  Json p = good_prompt();
  p["1"]["inputs"]["value"] = "three";
  Json e = first_error(prompt_validate(p, test_registry(&c)), "1");
  EXPECT_EQ(e["type"], "invalid_input_type");
  EXPECT_EQ(e["message"], "Failed to convert an input value to a INT value");
  EXPECT_EQ(e["extra_info"]["received_value"], "three");
}

TEST(PromptValidate, MinMaxAndList) {
  Counter c;
  Json p = good_prompt();
  p["1"]["inputs"]["value"] = -101;
  Json e = first_error(prompt_validate(p, test_registry(&c)), "1");
  EXPECT_EQ(e["type"], "value_smaller_than_min");
  EXPECT_EQ(e["message"], "Value -101 smaller than min of -100");
  p = good_prompt();
  p["4"]["inputs"]["scale"] = 10.5;
  e = first_error(prompt_validate(p, test_registry(&c)), "4");
  EXPECT_EQ(e["type"], "value_bigger_than_max");
  EXPECT_EQ(e["message"], "Value 10.5 bigger than max of 10");
  p = good_prompt();
  p["4"]["inputs"]["mode"] = "third";
  e = first_error(prompt_validate(p, test_registry(&c)), "4");
  EXPECT_EQ(e["type"], "value_not_in_list");
  EXPECT_EQ(e["details"], "mode: \"third\" not in [\"first\",\"second\"]");
}

TEST(PromptValidate, ReportsEveryProblemAtOnce) {
  Counter c;
  Json p = good_prompt();
  p["1"]["inputs"]["value"] = 1000;
  p["4"]["inputs"]["mode"] = "bad";
  p["4"]["inputs"].erase("scale");
  PromptValidation v = prompt_validate(p, test_registry(&c));
  ASSERT_FALSE(v.ok);
  EXPECT_EQ(v.error["node_errors"]["1"]["errors"].size(), 1u);
  EXPECT_EQ(v.error["node_errors"]["4"]["errors"].size(), 2u);
}

TEST(PromptValidate, Cycle) {
  Counter c;
  Json p = good_prompt();
  p["3"]["inputs"]["a"] = Json::array({"4", 0});
  p["4"]["inputs"]["x"] = Json::array({"3", 0});
  PromptValidation v = prompt_validate(p, test_registry(&c));
  ASSERT_FALSE(v.ok);
  // IMAGE into LATENT is a mismatch too; make the types line up for a pure cycle.
  p = Json::parse(R"({
    "1": {"class_type": "Add", "inputs": {"a": ["2", 0], "b": ["2", 0]}},
    "2": {"class_type": "Add", "inputs": {"a": ["1", 0], "b": ["1", 0]}},
    "3": {"class_type": "Pick", "inputs": {"x": ["1", 0], "mode": "first", "scale": 1}},
    "4": {"class_type": "Output", "inputs": {"images": ["3", 0]}}})");
  v = prompt_validate(p, test_registry(&c));
  ASSERT_FALSE(v.ok);
  EXPECT_EQ(v.error["error"]["message"], "Dependency cycle detected");
}

TEST(PromptExecute, OrderOnlyNeededNodesAndCache) {
  Counter c;
  NodeRegistry reg = test_registry(&c);
  PromptValidation v = prompt_validate(good_prompt(), reg);
  ASSERT_TRUE(v.ok);
  EXPECT_EQ(PromptExecutor::execution_order(v.prompt),
            (std::vector<std::string>{"1", "2", "3", "4", "5"}));  // "9" is not needed
  PromptExecutor ex;
  ExecOptions opts;
  Result<ExecResult> r = ex.execute(v.prompt, opts);
  ASSERT_TRUE(r.ok()) << r.status().str();
  EXPECT_EQ(r->ui_outputs["5"]["value"], 14.0);
  EXPECT_EQ(c.runs.count("9"), 0u);

  // Same prompt again: everything cached, nothing runs.
  r = ex.execute(v.prompt, opts);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->executed.empty());
  EXPECT_EQ(r->ui_outputs["5"]["value"], 14.0);

  // Change one input: only it and its downstream re-run.
  Json p = good_prompt();
  p["2"]["inputs"]["value"] = 5;
  v = prompt_validate(p, reg);
  ASSERT_TRUE(v.ok);
  r = ex.execute(v.prompt, opts);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->executed, (std::vector<std::string>{"2", "3", "4", "5"}));
  EXPECT_EQ(r->cached, std::vector<std::string>{"1"});
  EXPECT_EQ(r->ui_outputs["5"]["value"], 16.0);
  EXPECT_EQ(c.runs["1"], 1);
}

TEST(PromptExecute, FailingNodeIsNamed) {
  Counter c;
  NodeRegistry reg = test_registry(&c);
  NodeDef bad;
  bad.class_type = "Fail";
  bad.outputs = {{IoType::LATENT, "LATENT"}};
  bad.run = [](ExecContext&, const NodeInputs&) -> Result<std::vector<std::any>> {
    return Status(ErrorCode::INVALID_ARGUMENT, "boom");
  };
  reg.add(bad);
  Json p = good_prompt();
  p["1"] = Json{{"class_type", "Fail"}, {"inputs", Json::object()}};
  PromptValidation v = prompt_validate(p, reg);
  ASSERT_TRUE(v.ok);
  PromptExecutor ex;
  Result<ExecResult> r = ex.execute(v.prompt, ExecOptions{});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("node 1 (Fail): boom"), std::string::npos);
}

}  // namespace
}  // namespace hr
