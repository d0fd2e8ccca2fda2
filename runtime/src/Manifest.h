//===- Manifest.h - manifest.json: rules, validation, parsed form -*- C++ -*-===//
//
// Why: the runtime must refuse a malformed artifact with a message that names the
// offending key, before it allocates or dlopens anything. The rules live in
// schemas/manifest.schema.json; there is no JSON Schema library for C++ in Debian,
// so this file mirrors the schema as a small table of `Rule`s (the subset of JSON
// Schema the manifest uses) interpreted by one generic checker. A unit test walks
// the schema file and this table side by side and fails on any difference, so the
// schema stays the single source of truth. Rules JSON Schema cannot express (unique
// names, sizes, cross references) are checked afterwards in `parseManifest`.
//
//===----------------------------------------------------------------------===//
#ifndef ORTC_RUNTIME_MANIFEST_H
#define ORTC_RUNTIME_MANIFEST_H

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace ortc {
namespace manifest {

/// The JSON Schema `type`s the manifest uses.
enum class JsonType { String, Integer, Number, Array, Object };

struct Rule;
struct Property {
  std::string name;
  const Rule *rule;
};

/// One schema node. Only the keywords below are supported; the schema test fails if
/// the schema file uses any other validation keyword.
struct Rule {
  std::string ref; ///< non-empty: this node is `$defs/<ref>` (referenced by `$ref`)
  JsonType type = JsonType::String;
  // Strings.
  std::string pattern; ///< ECMAScript regex, "" = none
  int64_t minLength = 0;
  std::vector<std::string> choices; ///< `enum`
  std::optional<std::string> constString;
  // Integers.
  std::optional<int64_t> minimum, constInt;
  // Arrays.
  const Rule *items = nullptr;
  int64_t minItems = 0;
  // Objects.
  std::vector<std::string> required;
  std::vector<Property> properties;
  bool closed = false;          ///< `additionalProperties: false`
  const Rule *values = nullptr; ///< `additionalProperties: {...}`
  const Rule *names = nullptr;  ///< `propertyNames`
};

/// The root rule (the whole manifest).
const Rule &rootRule();
/// The format_version this runtime reads.
constexpr int64_t kFormatVersion = 2;

/// Checks `value` against `rule`; on failure sets `error` to "<path>: <what>".
bool validate(const nlohmann::json &value, const Rule &rule, const std::string &path,
              std::string &error);

/// Bytes per element of a manifest dtype, 0 if unknown.
size_t dtypeSize(const std::string &dtype);

} // namespace manifest

struct TensorDesc {
  std::string name, role, dtype;
  std::vector<int64_t> shape;
  int64_t numel = 1, bytes = 0;
  bool hasInit = false;
  int64_t initOffset = 0, initBytes = 0;
  bool initOmitted = false; ///< ortc build --no-params left its initial value out
  std::optional<double> defaultValue; ///< a scalar bound to this at session creation
};

/// One launch of a step program: a kernel symbol and what each of its pointer
/// arguments (kernel_abi.h) points at: a persistent tensor, an arena offset, or an
/// int64 value held for the launch.
struct LaunchDesc {
  struct Arg {
    enum Kind { Tensor, Arena, Value } kind = Tensor;
    int64_t value = 0; ///< tensor index, arena offset or the value
    int64_t bytes = 0; ///< Arena: the operand's size (0 in artifacts older than it)
  };
  std::string kernel;
  std::vector<Arg> args;
  std::string node, op; ///< optional: the ONNX node and op the launch runs
};

/// A step input used as an index: its values must lie in [low, high) or equal ignore.
struct IndexInputDesc {
  std::string input, what, node;
  int64_t low = 0, high = 0;
  bool hasIgnore = false;
  int64_t ignore = 0;
};

struct FunctionDesc {
  std::vector<LaunchDesc> launches;
  std::vector<std::string> inputs, outputs;
  std::vector<IndexInputDesc> indexInputs;
  std::vector<std::string> finiteChecks; ///< "finite_each"[i] checked this (loss, parameter)
  int64_t collectives = 0, collectiveBytes = 0; ///< data-parallel: collectives of one run
};

struct Manifest {
  int64_t formatVersion = 0;
  std::string target, kernelsObject;
  std::vector<std::string> arch;
  /// CPU flags a `--cpu native` artifact requires (empty for a named level).
  std::vector<std::string> cpuFeatures;
  int64_t arenaBytes = 0;
  std::vector<TensorDesc> tensors;
  std::map<std::string, size_t> byName;
  std::map<std::string, FunctionDesc> functions;
  std::map<std::string, std::string> files; ///< file name -> digest (ortc/digest.h)
  /// Data-parallel artifacts: the communicator their all-reduces need ("mpi"), else "".
  std::string communicator;
  /// ZeRO artifacts: the number of ranks their shards are built for (0: any).
  int64_t ranks = 0;
};

/// Why parseManifest failed: lets the C API pick a status code.
enum class ManifestError { None, Syntax, Version, Target, Invalid };

/// Parses and checks manifest text. Order: JSON syntax, format, format_version,
/// target (cpu, cuda or rocm), the schema rules, then the
/// semantic rules. Messages do not carry the file name (the caller prefixes it).
ManifestError parseManifest(const std::string &text, Manifest &out, std::string &error);

} // namespace ortc

#endif // ORTC_RUNTIME_MANIFEST_H
