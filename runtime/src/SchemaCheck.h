//===- SchemaCheck.h - A small JSON Schema validator -----------*- C++ -*-===//
//
// Validates manifest.json against schemas/manifest.schema.json (embedded into the
// runtime at build time), so the schema file is the one source of truth for the
// manifest's rules. Supports the keywords that schema uses: type, const, enum,
// required, properties, additionalProperties, items, minItems, minimum, minLength,
// pattern.
//
//===----------------------------------------------------------------------===//
#ifndef ORTC_RUNTIME_SCHEMACHECK_H
#define ORTC_RUNTIME_SCHEMACHECK_H

#include <nlohmann/json.hpp>

#include <string>

namespace ortc {
/// Returns "" when `value` satisfies `schema`, else a message with the JSON path.
std::string checkSchema(const nlohmann::json &schema, const nlohmann::json &value,
                        const std::string &path = "manifest");
/// The embedded manifest schema.
const nlohmann::json &manifestSchema();
} // namespace ortc

#endif // ORTC_RUNTIME_SCHEMACHECK_H
