//===- ManifestSchemaTest.cpp - The C++ rule table equals the schema file ===//
//
// Why: schemas/manifest.schema.json is the single source of truth for the
// manifest's rules, but the runtime checks a hand-written table (Manifest.cpp).
// This test walks both side by side (types, enums, consts, patterns, minimums,
// required lists, property sets, additionalProperties, $refs) and fails on any
// difference, or when the schema uses a keyword the C++ checker does not
// implement. The last tests exercise the checker's messages on real inputs.
//
//===----------------------------------------------------------------------===//
#include "Manifest.h"

#include <gtest/gtest.h>

#include <fstream>
#include <set>

using nlohmann::json;
using ortc::manifest::JsonType;
using ortc::manifest::Rule;

namespace {

json loadSchema() {
  std::ifstream f(ORTC_SCHEMA_FILE);
  EXPECT_TRUE(f.good()) << "cannot open " << ORTC_SCHEMA_FILE;
  return json::parse(f);
}

const char *typeName(JsonType t) {
  switch (t) {
  case JsonType::String:
    return "string";
  case JsonType::Integer:
    return "integer";
  case JsonType::Number:
    return "number";
  case JsonType::Array:
    return "array";
  case JsonType::Object:
    return "object";
  }
  return "?";
}

/// Appends every difference between `rule` and the schema node `node` to `diffs`.
void compare(const Rule &rule, const json &node, const json &schema, const std::string &path,
             std::vector<std::string> &diffs) {
  auto diff = [&](const std::string &what) { diffs.push_back(path + ": " + what); };
  json n = node;
  if (node.contains("$ref")) {
    std::string ref = node["$ref"], prefix = "#/$defs/";
    if (ref.rfind(prefix, 0) != 0 || !schema["$defs"].contains(ref.substr(prefix.size())))
      return diff("unresolvable $ref " + ref);
    if (rule.ref != ref.substr(prefix.size()))
      diff("schema refers to " + ref + ", the table has ref '" + rule.ref + "'");
    n = schema["$defs"][ref.substr(prefix.size())];
  } else if (!rule.ref.empty()) {
    diff("the table says $defs/" + rule.ref + ", the schema has an inline node");
  }
  static const std::set<std::string> implemented = {"type",
                                                    "pattern",
                                                    "minLength",
                                                    "enum",
                                                    "const",
                                                    "minimum",
                                                    "items",
                                                    "minItems",
                                                    "required",
                                                    "properties",
                                                    "additionalProperties",
                                                    "propertyNames",
                                                    "description",
                                                    "title",
                                                    "$schema",
                                                    "$id",
                                                    "$defs",
                                                    "$ref"};
  for (auto it = n.begin(); it != n.end(); ++it)
    if (!implemented.count(it.key()))
      diff("keyword '" + it.key() + "' is not implemented by the C++ checker");
  if (n.value("type", "") != typeName(rule.type))
    diff("type " + n.value("type", std::string("(none)")) + " vs " + typeName(rule.type));
  if (n.value("pattern", "") != rule.pattern)
    diff("pattern " + n.value("pattern", "") + " vs " + rule.pattern);
  if (n.value("minLength", int64_t(0)) != rule.minLength)
    diff("minLength differs");
  if (n.value("enum", json::array()) != json(rule.choices))
    diff("enum " + n.value("enum", json::array()).dump() + " vs " + json(rule.choices).dump());
  json c = n.value("const", json());
  json ruleConst = rule.constString ? json(*rule.constString)
                   : rule.constInt  ? json(*rule.constInt)
                                    : json();
  if (c != ruleConst)
    diff("const " + c.dump() + " vs " + ruleConst.dump());
  json minimum = rule.minimum ? json(*rule.minimum) : json();
  if (n.value("minimum", json()) != minimum)
    diff("minimum differs");
  if (n.value("minItems", int64_t(0)) != rule.minItems)
    diff("minItems differs");
  if (n.contains("items") != (rule.items != nullptr))
    diff("items present in only one of them");
  else if (rule.items)
    compare(*rule.items, n["items"], schema, path + "/items", diffs);
  if (n.value("required", json::array()) != json(rule.required))
    diff("required " + n.value("required", json::array()).dump() + " vs " +
         json(rule.required).dump());
  json props = n.value("properties", json::object());
  std::set<std::string> tableProps;
  for (const auto &p : rule.properties) {
    tableProps.insert(p.name);
    if (!props.contains(p.name))
      diff("property '" + p.name + "' is only in the table");
    else
      compare(*p.rule, props[p.name], schema, path + "/" + p.name, diffs);
  }
  for (auto it = props.begin(); it != props.end(); ++it)
    if (!tableProps.count(it.key()))
      diff("property '" + it.key() + "' is only in the schema");
  json extra = n.value("additionalProperties", json());
  if (extra.is_boolean()) {
    if (extra.get<bool>() == rule.closed || rule.values)
      diff("additionalProperties differs");
  } else if (extra.is_object() != (rule.values != nullptr) || (extra.is_null() && rule.closed)) {
    diff("additionalProperties differs");
  } else if (rule.values) {
    compare(*rule.values, extra, schema, path + "/additionalProperties", diffs);
  }
  if (n.contains("propertyNames") != (rule.names != nullptr))
    diff("propertyNames present in only one of them");
  else if (rule.names)
    compare(*rule.names, n["propertyNames"], schema, path + "/propertyNames", diffs);
}

std::vector<std::string> differences(const json &schema) {
  std::vector<std::string> diffs;
  compare(ortc::manifest::rootRule(), schema, schema, "#", diffs);
  return diffs;
}

std::string joinLines(const std::vector<std::string> &lines) {
  std::string s;
  for (const auto &l : lines)
    s += l + "\n";
  return s;
}

} // namespace

TEST(ManifestSchema, TableMatchesSchemaFile) {
  json schema = loadSchema();
  EXPECT_EQ(schema["$schema"], "https://json-schema.org/draft/2020-12/schema");
  std::vector<std::string> diffs = differences(schema);
  EXPECT_TRUE(diffs.empty()) << joinLines(diffs);
}

TEST(ManifestSchema, EnumsAndRequiredListsMatch) {
  json schema = loadSchema();
  const Rule &root = ortc::manifest::rootRule();
  auto prop = [](const Rule &r, const std::string &name) -> const Rule & {
    for (const auto &p : r.properties)
      if (p.name == name)
        return *p.rule;
    ADD_FAILURE() << "no property " << name;
    return r;
  };
  const Rule &tensor = *prop(root, "tensors").items;
  EXPECT_EQ(json(root.required), schema["required"]);
  EXPECT_EQ(json(prop(root, "target").choices), schema["properties"]["target"]["enum"]);
  EXPECT_EQ(json(tensor.required), schema["$defs"]["tensor"]["required"]);
  EXPECT_EQ(json(prop(tensor, "role").choices),
            schema["$defs"]["tensor"]["properties"]["role"]["enum"]);
  EXPECT_EQ(json(prop(tensor, "dtype").choices),
            schema["$defs"]["tensor"]["properties"]["dtype"]["enum"]);
  EXPECT_EQ(json(prop(root, "functions").values->required),
            schema["$defs"]["function"]["required"]);
  EXPECT_EQ(ortc::manifest::kFormatVersion, schema["properties"]["format_version"]["const"]);
}

TEST(ManifestSchema, ComparisonDetectsDrift) {
  json schema = loadSchema();
  json a = schema;
  a["$defs"]["tensor"]["properties"]["role"]["enum"].push_back("weights");
  EXPECT_FALSE(differences(a).empty());
  json b = schema;
  b["$defs"]["init"]["required"] = {"offset"};
  EXPECT_FALSE(differences(b).empty());
  json c = schema;
  c["properties"]["arch"]["maxItems"] = 4;
  EXPECT_NE(joinLines(differences(c)).find("maxItems"), std::string::npos);
  json d = schema;
  d["$defs"]["function"]["additionalProperties"] = true;
  EXPECT_FALSE(differences(d).empty());
  json e = schema;
  e["properties"]["kernels_object"] = {{"type", "string"}};
  EXPECT_FALSE(differences(e).empty());
}

TEST(ManifestSchema, CheckerReportsThePath) {
  json m = {
      {"format", "ortc-artifact"},
      {"format_version", 2},
      {"target", "cpu"},
      {"arch", {"x86-64-v2"}},
      {"kernels_object", "kernels.so"},
      {"arena_bytes", 0},
      {"functions",
       {{"train_step",
         {{"launches", json::array()}, {"inputs", json::array()}, {"outputs", json::array()}}}}},
      {"files", {{"kernels.so", std::string(64, 'a')}}},
      {"tensors", {{{"name", "w"}, {"role", "weights"}, {"dtype", "f32"}, {"shape", {2}}}}}};
  std::string error;
  EXPECT_FALSE(ortc::manifest::validate(m, ortc::manifest::rootRule(), "", error));
  EXPECT_EQ(error, "tensors[0] ('w').role: \"weights\" is not one of input, scalar, parameter, "
                   "buffer, state, constant, output");
  m["tensors"][0]["role"] = "parameter";
  EXPECT_TRUE(ortc::manifest::validate(m, ortc::manifest::rootRule(), "", error)) << error;
  m["tensors"][0]["shape"] = {2, -1};
  EXPECT_FALSE(ortc::manifest::validate(m, ortc::manifest::rootRule(), "", error));
  EXPECT_EQ(error, "tensors[0] ('w').shape[1]: -1 is below the minimum 0");
  m["tensors"][0]["shape"] = {2};
  m["kernels_object"] = "../evil.so";
  EXPECT_FALSE(ortc::manifest::validate(m, ortc::manifest::rootRule(), "", error));
  EXPECT_NE(error.find("kernels_object"), std::string::npos) << error;
  m["kernels_object"] = "kernels.so";
  m["extra"] = 1;
  EXPECT_FALSE(ortc::manifest::validate(m, ortc::manifest::rootRule(), "", error));
  EXPECT_EQ(error, "manifest: unknown key \"extra\"");
  m.erase("extra");
  m["functions"]["train_step"]["launches"] = {{{"kernel", "k0"}, {"args", {{{"arena", -4}}}}}};
  EXPECT_FALSE(ortc::manifest::validate(m, ortc::manifest::rootRule(), "", error));
  EXPECT_EQ(error, "functions.train_step.launches[0].args[0].arena: -4 is below the minimum 0");
  m["functions"]["train_step"].erase("launches");
  EXPECT_FALSE(ortc::manifest::validate(m, ortc::manifest::rootRule(), "", error));
  EXPECT_EQ(error, "functions.train_step: missing required key \"launches\"");
}

TEST(ManifestSchema, SemanticChecks) {
  json m = {{"format", "ortc-artifact"},
            {"format_version", 2},
            {"target", "cpu"},
            {"arch", {"x86-64-v2"}},
            {"kernels_object", "kernels.so"},
            {"arena_bytes", 0},
            {"functions",
             {{"train_step",
               {{"launches", json::array()}, {"inputs", {"x"}}, {"outputs", json::array()}}}}},
            {"files", {{"kernels.so", std::string(64, 'a')}, {"params.bin", std::string(64, 'b')}}},
            {"tensors",
             {{{"name", "x"}, {"role", "input"}, {"dtype", "f32"}, {"shape", {2, 3}}},
              {{"name", "w"},
               {"role", "parameter"},
               {"dtype", "f64"},
               {"shape", {3}},
               {"init", {{"offset", 0}, {"bytes", 24}}}}}}};
  ortc::Manifest parsed;
  std::string error;
  ASSERT_EQ(ortc::parseManifest(m.dump(), parsed, error), ortc::ManifestError::None) << error;
  EXPECT_EQ(parsed.tensors[0].bytes, 24);
  EXPECT_EQ(parsed.tensors[1].initBytes, 24);

  json bad = m;
  bad["tensors"][1]["init"]["bytes"] = 12;
  EXPECT_EQ(ortc::parseManifest(bad.dump(), parsed, error), ortc::ManifestError::Invalid);
  EXPECT_NE(error.find("tensor 'w': init.bytes is 12"), std::string::npos) << error;
  bad = m;
  bad["tensors"][1]["name"] = "x";
  EXPECT_EQ(ortc::parseManifest(bad.dump(), parsed, error), ortc::ManifestError::Invalid);
  EXPECT_NE(error.find("'x' is listed twice"), std::string::npos) << error;
  bad = m;
  bad["functions"]["train_step"]["inputs"] = {"nope"};
  EXPECT_EQ(ortc::parseManifest(bad.dump(), parsed, error), ortc::ManifestError::Invalid);
  EXPECT_NE(error.find("'nope'"), std::string::npos) << error;
  bad = m;
  bad["files"].erase("kernels.so");
  EXPECT_EQ(ortc::parseManifest(bad.dump(), parsed, error), ortc::ManifestError::Invalid);
  bad = m;
  bad["format_version"] = 7;
  EXPECT_EQ(ortc::parseManifest(bad.dump(), parsed, error), ortc::ManifestError::Version);
  EXPECT_EQ(error, "format version 7, but this runtime reads version 2");
  bad = m;
  bad["target"] = "rocm";
  EXPECT_EQ(ortc::parseManifest(bad.dump(), parsed, error), ortc::ManifestError::None) << error;
  bad["target"] = "tpu";
  EXPECT_EQ(ortc::parseManifest(bad.dump(), parsed, error), ortc::ManifestError::Target);
  EXPECT_NE(error.find("unknown target 'tpu' (this runtime runs cpu, cuda and rocm artifacts)"),
            std::string::npos)
      << error;
  EXPECT_EQ(ortc::parseManifest("{\"format\": \"ortc-artifact\", ", parsed, error),
            ortc::ManifestError::Syntax);
  EXPECT_EQ(ortc::parseManifest("[1, 2]", parsed, error), ortc::ManifestError::Syntax);
}
