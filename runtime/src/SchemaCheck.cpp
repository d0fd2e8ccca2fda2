//===- SchemaCheck.cpp - A small JSON Schema validator -------------------===//
#include "SchemaCheck.h"

#include <regex>

extern const char *const ortcManifestSchemaSource; // generated from the schema file

namespace ortc {

using nlohmann::json;

static bool hasType(const json &v, const std::string &t) {
  if (t == "object") return v.is_object();
  if (t == "array") return v.is_array();
  if (t == "string") return v.is_string();
  if (t == "integer") return v.is_number_integer();
  if (t == "number") return v.is_number();
  if (t == "boolean") return v.is_boolean();
  return false;
}

std::string checkSchema(const json &s, const json &v, const std::string &path) {
  if (s.contains("type") && !hasType(v, s["type"]))
    return path + ": must be of type " + s["type"].get<std::string>();
  if (s.contains("const") && v != s["const"])
    return path + ": must be " + s["const"].dump() + ", got " + v.dump();
  if (s.contains("enum")) {
    bool found = false;
    for (const json &e : s["enum"])
      found |= e == v;
    if (!found)
      return path + ": " + v.dump() + " is not one of " + s["enum"].dump();
  }
  if (s.contains("minimum") && v.is_number() && v.get<double>() < s["minimum"].get<double>())
    return path + ": must be >= " + s["minimum"].dump();
  if (v.is_string()) {
    if (s.contains("minLength") && v.get<std::string>().size() < s["minLength"].get<size_t>())
      return path + ": must not be empty";
    if (s.contains("pattern") &&
        !std::regex_search(v.get<std::string>(), std::regex(s["pattern"].get<std::string>())))
      return path + ": does not match " + s["pattern"].get<std::string>();
  }
  if (v.is_array()) {
    if (s.contains("minItems") && v.size() < s["minItems"].get<size_t>())
      return path + ": needs at least " + s["minItems"].dump() + " items";
    if (s.contains("items"))
      for (size_t i = 0; i < v.size(); ++i)
        if (auto e = checkSchema(s["items"], v[i], path + "[" + std::to_string(i) + "]");
            !e.empty())
          return e;
  }
  if (v.is_object()) {
    if (s.contains("required"))
      for (const json &r : s["required"])
        if (!v.contains(r.get<std::string>()))
          return path + ": missing '" + r.get<std::string>() + "'";
    for (auto it = v.begin(); it != v.end(); ++it) {
      std::string sub = path + "." + it.key();
      if (s.contains("properties") && s["properties"].contains(it.key())) {
        if (auto e = checkSchema(s["properties"][it.key()], it.value(), sub); !e.empty())
          return e;
      } else if (s.contains("additionalProperties")) {
        const json &ap = s["additionalProperties"];
        if (ap.is_boolean() && !ap.get<bool>())
          return path + ": unexpected key '" + it.key() + "'";
        if (ap.is_object())
          if (auto e = checkSchema(ap, it.value(), sub); !e.empty())
            return e;
      }
    }
  }
  return "";
}

const json &manifestSchema() {
  static const json schema = json::parse(ortcManifestSchemaSource);
  return schema;
}

} // namespace ortc
