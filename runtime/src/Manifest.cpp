//===- Manifest.cpp - manifest.json rules and checks -----------------------===//
//
// Why: one table (`Rules` below) mirrors schemas/manifest.schema.json and one
// generic interpreter (`validate`) applies it, so adding a rule is a table edit
// plus a schema edit, which the schema test checks against each other. The
// checks the schema cannot express follow in parseManifest.
//
//===----------------------------------------------------------------------===//
#include "Manifest.h"

#include <algorithm>
#include <limits>
#include <regex>
#include <set>

namespace ortc {
namespace manifest {
namespace {

Rule stringRule(std::string pattern = "", int64_t minLength = 0) {
  Rule r;
  r.type = JsonType::String;
  r.pattern = std::move(pattern);
  r.minLength = minLength;
  return r;
}

Rule enumRule(std::vector<std::string> choices) {
  Rule r;
  r.choices = std::move(choices);
  return r;
}

Rule intRule(std::optional<int64_t> minimum, std::optional<int64_t> constant = {}) {
  Rule r;
  r.type = JsonType::Integer;
  r.minimum = minimum;
  r.constInt = constant;
  return r;
}

Rule arrayRule(const Rule *items, int64_t minItems = 0) {
  Rule r;
  r.type = JsonType::Array;
  r.items = items;
  r.minItems = minItems;
  return r;
}

Rule objectRule(std::vector<std::string> required, std::vector<Property> properties) {
  Rule r;
  r.type = JsonType::Object;
  r.required = std::move(required);
  r.properties = std::move(properties);
  r.closed = true;
  return r;
}

/// The table. Member order matters: a rule may only point at members above it.
struct Rules {
  // $defs.
  Rule fileName = stringRule("^[A-Za-z0-9_][A-Za-z0-9_.+-]*$");
  Rule symbol = stringRule("^[A-Za-z_][A-Za-z0-9_]*$");
  Rule nonEmpty = stringRule("", 1);
  Rule count = intRule(0);
  Rule role = enumRule({"input", "scalar", "parameter", "buffer", "state", "constant", "output"});
  Rule dtype = enumRule({"f32", "f64", "i64", "i32", "bool", "f16", "bf16"});
  Rule shape = arrayRule(&count);
  Rule init = objectRule({"offset", "bytes"}, {{"offset", &count}, {"bytes", &count}});
  Rule initOmitted = objectRule({"bytes"}, {{"bytes", &count}});
  Rule number = [] {
    Rule r;
    r.type = JsonType::Number;
    return r;
  }();
  Rule tensor = objectRule({"name", "role", "dtype", "shape"}, {{"name", &nonEmpty},
                                                                {"role", &role},
                                                                {"dtype", &dtype},
                                                                {"shape", &shape},
                                                                {"init", &init},
                                                                {"init_omitted", &initOmitted},
                                                                {"default", &number}});
  Rule nameList = arrayRule(&nonEmpty);
  Rule anyInt = intRule({});
  Rule anyString = stringRule();
  Rule launchArg = objectRule({}, {{"tensor", &count}, {"arena", &count}, {"bytes", &count}, {"value", &anyInt}});
  Rule launchArgs = arrayRule(&launchArg);
  Rule launch = objectRule({"kernel", "args"}, {{"kernel", &symbol},
                                               {"args", &launchArgs},
                                               {"node", &anyString},
                                               {"op", &anyString}});
  Rule launchList = arrayRule(&launch);
  Rule indexInput = objectRule({"input", "low", "high"}, {{"input", &nonEmpty},
                                                          {"low", &anyInt},
                                                          {"high", &anyInt},
                                                          {"ignore", &anyInt},
                                                          {"what", &anyString},
                                                          {"node", &anyString}});
  Rule indexInputs = arrayRule(&indexInput);
  Rule collectiveStats = objectRule({"calls", "bytes"}, {{"calls", &count}, {"bytes", &count}});
  Rule function = objectRule({"launches", "inputs", "outputs"}, {{"launches", &launchList},
                                                                {"inputs", &nameList},
                                                                {"outputs", &nameList},
                                                                {"arena_bytes", &count},
                                                                {"arena_lower_bound", &count},
                                                                {"index_inputs", &indexInputs},
                                                                {"finite_checks", &nameList},
                                                                {"collectives", &collectiveStats}});
  // Top level.
  Rule format = stringRule();
  Rule version = intRule({}, kFormatVersion);
  Rule target = enumRule({"cpu", "cuda", "rocm"});
  Rule archName = stringRule("^[A-Za-z0-9_.+-]+$");
  Rule arch = arrayRule(&archName, 1);
  Rule cpuFeatures = arrayRule(&archName);
  Rule precision = enumRule({"fp32", "bf16", "fp16"});
  Rule tensors = arrayRule(&tensor);
  Rule communicator = enumRule({"mpi", "nccl", "rccl"});
  Rule ranks = intRule(1);
  Rule dataParallel = objectRule({"communicator"}, {{"communicator", &communicator}, {"ranks", &ranks}});
  Rule functions;
  Rule digest = stringRule("^([0-9a-f]{64}|xxh3-128:[0-9a-f]{32})$"); // ortc/digest.h
  Rule files;
  Rule root;

  Rules() {
    fileName.ref = "fileName";
    symbol.ref = "symbol";
    tensor.ref = "tensor";
    init.ref = "init";
    initOmitted.ref = "initOmitted";
    launchArg.ref = "launchArg";
    launch.ref = "launch";
    indexInput.ref = "indexInput";
    function.ref = "function";
    format.constString = "ortc-artifact";
    functions = objectRule({"train_step"}, {});
    functions.closed = false;
    functions.names = &symbol;
    functions.values = &function;
    files = objectRule({}, {});
    files.closed = false;
    files.names = &fileName;
    files.values = &digest;
    root = objectRule({"format", "format_version", "target", "arch", "kernels_object",
                       "arena_bytes", "tensors", "functions", "files"},
                      {{"format", &format},
                       {"format_version", &version},
                       {"target", &target},
                       {"arch", &arch},
                       {"cpu_features", &cpuFeatures},
                       {"precision", &precision},
                       {"kernels_object", &fileName},
                       {"arena_bytes", &count},
                       {"tensors", &tensors},
                       {"functions", &functions},
                       {"data_parallel", &dataParallel},
                       {"files", &files}});
  }
};

const char *typeName(JsonType t) {
  switch (t) {
  case JsonType::String:
    return "a string";
  case JsonType::Integer:
    return "an integer";
  case JsonType::Number:
    return "a number";
  case JsonType::Array:
    return "an array";
  case JsonType::Object:
    return "an object";
  }
  return "?";
}

std::string join(const std::vector<std::string> &items) {
  std::string out;
  for (const std::string &s : items)
    out += (out.empty() ? "" : ", ") + s;
  return out;
}

std::string show(const nlohmann::json &v) {
  std::string s = v.dump();
  return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

bool fail(std::string &error, const std::string &path, const std::string &what) {
  error = (path.empty() ? std::string("manifest") : path) + ": " + what;
  return false;
}

} // namespace

const Rule &rootRule() {
  static const Rules rules;
  return rules.root;
}

bool validate(const nlohmann::json &v, const Rule &r, const std::string &path, std::string &error) {
  bool typeOk = r.type == JsonType::String    ? v.is_string()
                : r.type == JsonType::Integer ? v.is_number_integer()
                : r.type == JsonType::Number  ? v.is_number()
                : r.type == JsonType::Array   ? v.is_array()
                                              : v.is_object();
  if (!typeOk)
    return fail(error, path, "expected " + std::string(typeName(r.type)) + ", got " + show(v));
  switch (r.type) {
  case JsonType::String: {
    const std::string &s = v.get_ref<const std::string &>();
    if (int64_t(s.size()) < r.minLength)
      return fail(error, path, "must not be empty");
    if (r.constString && s != *r.constString)
      return fail(error, path, show(v) + " is not \"" + *r.constString + "\"");
    if (!r.choices.empty() && std::find(r.choices.begin(), r.choices.end(), s) == r.choices.end())
      return fail(error, path, show(v) + " is not one of " + join(r.choices));
    if (!r.pattern.empty() && !std::regex_search(s, std::regex(r.pattern)))
      return fail(error, path, show(v) + " does not match " + r.pattern);
    return true;
  }
  case JsonType::Integer: {
    if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
      return fail(error, path, show(v) + " is too large");
    int64_t i = v.get<int64_t>();
    if (r.minimum && i < *r.minimum)
      return fail(error, path, show(v) + " is below the minimum " + std::to_string(*r.minimum));
    if (r.constInt && i != *r.constInt)
      return fail(error, path, show(v) + " is not " + std::to_string(*r.constInt));
    return true;
  }
  case JsonType::Number:
    return true;
  case JsonType::Array: {
    if (int64_t(v.size()) < r.minItems)
      return fail(error, path, "needs at least " + std::to_string(r.minItems) + " item(s)");
    for (size_t i = 0; i < v.size(); ++i) {
      std::string at = path + "[" + std::to_string(i) + "]";
      const nlohmann::json &item = v[i];
      if (item.is_object() && item.contains("name") && item["name"].is_string())
        at += " ('" + item["name"].get<std::string>() + "')";
      if (r.items && !validate(item, *r.items, at, error))
        return false;
    }
    return true;
  }
  case JsonType::Object: {
    for (const std::string &key : r.required)
      if (!v.contains(key))
        return fail(error, path, "missing required key \"" + key + "\"");
    for (auto it = v.begin(); it != v.end(); ++it) {
      std::string at = path.empty() ? it.key() : path + "." + it.key();
      const Property *prop = nullptr;
      for (const Property &p : r.properties)
        if (p.name == it.key())
          prop = &p;
      if (r.names && !validate(it.key(), *r.names, at + " (key)", error))
        return false;
      if (prop) {
        if (!validate(it.value(), *prop->rule, at, error))
          return false;
      } else if (r.closed) {
        return fail(error, path, "unknown key \"" + it.key() + "\"");
      } else if (r.values && !validate(it.value(), *r.values, at, error)) {
        return false;
      }
    }
    return true;
  }
  }
  return true;
}

size_t dtypeSize(const std::string &d) {
  if (d == "f32" || d == "i32")
    return 4;
  if (d == "f64" || d == "i64")
    return 8;
  if (d == "f16" || d == "bf16")
    return 2;
  if (d == "bool")
    return 1;
  return 0;
}

} // namespace manifest

namespace {

/// a * b, or false on int64 overflow.
bool mulChecked(int64_t a, int64_t b, int64_t &out) {
  if (a != 0 && b > std::numeric_limits<int64_t>::max() / a)
    return false;
  out = a * b;
  return true;
}

std::vector<std::string> strings(const nlohmann::json &v) {
  std::vector<std::string> out;
  for (const auto &s : v)
    out.push_back(s.get<std::string>());
  return out;
}

} // namespace

ManifestError parseManifest(const std::string &text, Manifest &m, std::string &error) {
  m = Manifest();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error &e) {
    error = std::string("not valid JSON: ") + e.what();
    return ManifestError::Syntax;
  }
  if (!j.is_object()) {
    error = "not a JSON object";
    return ManifestError::Syntax;
  }
  // The identity checks come first so that a newer or foreign artifact gets a message
  // about its version or target, not about a key this runtime does not know.
  if (!j.contains("format") || j["format"] != "ortc-artifact") {
    error = "not an ortc artifact manifest (\"format\" is " +
            (j.contains("format") ? j["format"].dump() : std::string("missing")) +
            ", expected \"ortc-artifact\")";
    return ManifestError::Invalid;
  }
  const nlohmann::json &ver = j.contains("format_version") ? j["format_version"] : nullptr;
  if (!ver.is_number_integer() || ver.get<int64_t>() != manifest::kFormatVersion) {
    error = "format version " + (ver.is_null() ? std::string("missing") : ver.dump()) +
            ", but this runtime reads version " + std::to_string(manifest::kFormatVersion);
    return ManifestError::Version;
  }
  if (j.contains("target") && j["target"].is_string()) {
    const manifest::Rule &root = manifest::rootRule();
    const manifest::Rule *targets = nullptr;
    for (const manifest::Property &p : root.properties)
      if (p.name == "target")
        targets = p.rule;
    std::string t = j["target"].get<std::string>();
    if (!targets ||
        std::find(targets->choices.begin(), targets->choices.end(), t) == targets->choices.end()) {
      error = "unknown target '" + t + "' (this runtime runs cpu, cuda and rocm artifacts)";
      return ManifestError::Target;
    }
  }
  if (!manifest::validate(j, manifest::rootRule(), "", error))
    return ManifestError::Invalid;

  m.formatVersion = j["format_version"].get<int64_t>();
  m.target = j["target"].get<std::string>();
  m.arch = strings(j["arch"]);
  if (j.contains("cpu_features"))
    m.cpuFeatures = strings(j["cpu_features"]);
  if (j.contains("data_parallel"))
  {
    m.communicator = j["data_parallel"]["communicator"].get<std::string>();
    m.ranks = j["data_parallel"].value("ranks", int64_t(0));
  }
  m.kernelsObject = j["kernels_object"].get<std::string>();
  m.arenaBytes = j["arena_bytes"].get<int64_t>();
  for (const auto &t : j["tensors"]) {
    TensorDesc d;
    d.name = t["name"].get<std::string>();
    d.role = t["role"].get<std::string>();
    d.dtype = t["dtype"].get<std::string>();
    d.shape = t["shape"].get<std::vector<int64_t>>();
    std::string where = "tensor '" + d.name + "'";
    for (int64_t dim : d.shape)
      if (!mulChecked(d.numel, dim, d.numel)) {
        error = where + ": the shape is too large";
        return ManifestError::Invalid;
      }
    if (!mulChecked(d.numel, int64_t(manifest::dtypeSize(d.dtype)), d.bytes)) {
      error = where + ": the shape is too large";
      return ManifestError::Invalid;
    }
    if (t.contains("init")) {
      d.hasInit = true;
      d.initOffset = t["init"]["offset"].get<int64_t>();
      d.initBytes = t["init"]["bytes"].get<int64_t>();
      if (d.initBytes != d.bytes) {
        error = where + ": init.bytes is " + std::to_string(d.initBytes) + " but a " + d.dtype +
                " tensor of this shape has " + std::to_string(d.bytes) + " bytes";
        return ManifestError::Invalid;
      }
    }
    if (t.contains("init_omitted")) {
      if (d.hasInit || t["init_omitted"]["bytes"].get<int64_t>() != d.bytes) {
        error = where + ": init_omitted " + (d.hasInit ? "beside an init" : "does not match the tensor's size");
        return ManifestError::Invalid;
      }
      d.initOmitted = true;
    }
    if (t.contains("default")) {
      if (d.role != "scalar" || d.numel != 1 || (d.dtype != "f32" && d.dtype != "f64")) {
        error = where + ": a default is for float scalars";
        return ManifestError::Invalid;
      }
      d.defaultValue = t["default"].get<double>();
    }
    if (!m.byName.emplace(d.name, m.tensors.size()).second) {
      error = where + " is listed twice";
      return ManifestError::Invalid;
    }
    m.tensors.push_back(std::move(d));
  }
  for (auto it = j["functions"].begin(); it != j["functions"].end(); ++it) {
    FunctionDesc f;
    std::string where = "function '" + it.key() + "'";
    for (const auto &l : it.value()["launches"]) {
      LaunchDesc d;
      d.kernel = l["kernel"].get<std::string>();
      d.node = l.value("node", "");
      d.op = l.value("op", "");
      for (const auto &a : l["args"]) {
        const bool sized = a.contains("bytes");
        if (a.size() != 1 + sized || (sized && !a.contains("arena"))) {
          error = where + ": kernel '" + d.kernel +
                  "' has an argument that is not exactly one of \"tensor\", \"arena\" (with its "
                  "\"bytes\") or \"value\"";
          return ManifestError::Invalid;
        }
        LaunchDesc::Arg arg;
        arg.kind = a.contains("arena")   ? LaunchDesc::Arg::Arena
                   : a.contains("value") ? LaunchDesc::Arg::Value
                                         : LaunchDesc::Arg::Tensor;
        arg.value = a[arg.kind == LaunchDesc::Arg::Arena   ? "arena"
                      : arg.kind == LaunchDesc::Arg::Value ? "value"
                                                           : "tensor"]
                        .get<int64_t>();
        arg.bytes = a.value("bytes", int64_t(0));
        bool inArena = arg.kind == LaunchDesc::Arg::Arena;
        if ((inArena && arg.value + arg.bytes > m.arenaBytes) ||
            (arg.kind == LaunchDesc::Arg::Tensor && arg.value >= int64_t(m.tensors.size()))) {
          error = where + ": kernel '" + d.kernel + "' has an argument outside " +
                  (inArena ? "the arena (offset " + std::to_string(arg.value) + ", " +
                                 std::to_string(arg.bytes) + " bytes, of " +
                                 std::to_string(m.arenaBytes) + " bytes)"
                           : "\"tensors\" (index " + std::to_string(arg.value) + ")");
          return ManifestError::Invalid;
        }
        d.args.push_back(arg);
      }
      f.launches.push_back(std::move(d));
    }
    f.inputs = strings(it.value()["inputs"]);
    f.outputs = strings(it.value()["outputs"]);
    if (it.value().contains("finite_checks"))
      f.finiteChecks = strings(it.value()["finite_checks"]);
    if (it.value().contains("collectives")) {
      f.collectives = it.value()["collectives"]["calls"].get<int64_t>();
      f.collectiveBytes = it.value()["collectives"]["bytes"].get<int64_t>();
    }
    for (const auto &r : it.value().value("index_inputs", nlohmann::json::array())) {
      IndexInputDesc d;
      d.input = r["input"].get<std::string>();
      d.low = r["low"].get<int64_t>();
      d.high = r["high"].get<int64_t>();
      d.what = r.value("what", std::string("indices"));
      d.node = r.value("node", std::string());
      d.hasIgnore = r.contains("ignore");
      d.ignore = r.value("ignore", int64_t(0));
      if (!m.byName.count(d.input)) {
        error = where + ": \"index_inputs\" names '" + d.input + "', which is not a tensor";
        return ManifestError::Invalid;
      }
      f.indexInputs.push_back(std::move(d));
    }
    for (const auto *list : {&f.inputs, &f.outputs})
      for (const std::string &name : *list)
        if (!m.byName.count(name)) {
          error = "function '" + it.key() + "' names tensor '" + name +
                  "', which is not in \"tensors\"";
          return ManifestError::Invalid;
        }
    m.functions[it.key()] = std::move(f);
  }
  for (auto it = j["files"].begin(); it != j["files"].end(); ++it)
    m.files[it.key()] = it.value().get<std::string>();
  if (!m.files.count(m.kernelsObject)) {
    error = "\"files\" has no SHA-256 for the kernels object '" + m.kernelsObject + "'";
    return ManifestError::Invalid;
  }
  for (const TensorDesc &d : m.tensors)
    if (d.hasInit && !m.files.count("params.bin")) {
      error = "tensor '" + d.name + "' has an init but \"files\" lists no params.bin";
      return ManifestError::Invalid;
    }
  return ManifestError::None;
}

} // namespace ortc
