//===- OnnxImporter.cpp - ONNX protobuf -> ortc dialect ------------------===//
//
// Algorithm:
//  1. Parse the model (binary, or protobuf text for `.onnxtxt`), refusing anything
//     that is not a well-formed ModelProto.
//  2. Contract check over the whole graph before building anything: unsupported ops,
//     unbound symbolic dims, bad dims and unsupported dtypes are all collected and
//     reported together, each with its node or tensor name.
//  3. Order the nodes topologically (dangling inputs and cycles are errors).
//  4. Read initializers (inline or external data confined to the model's folder) into
//     the WeightStore and declare each as an `ortc.global`.
//  5. Convert node by node; nodes whose inputs are all known at import time (shape
//     subgraphs) are evaluated on the host instead of emitted.
//
//===----------------------------------------------------------------------===//
#include "compiler/Import/ImportContext.h"
#include "compiler/Import/InferenceGraph.h"
#include "compiler/Import/ModelMapping.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Verifier.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl.h>
#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>
#include <google/protobuf/unknown_field_set.h>
#include <onnx/defs/schema.h>

#include <cmath>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <limits.h>
#include <set>
#include <sstream>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

using namespace mlir;

namespace ortc {

//===-- small helpers -----------------------------------------------------===//

bool HostTensor::isFloat() const {
  return elemType == onnx::TensorProto::FLOAT || elemType == onnx::TensorProto::DOUBLE ||
         elemType == onnx::TensorProto::FLOAT16 || elemType == onnx::TensorProto::BFLOAT16;
}

int64_t toInt64(double v) {
  if (std::isnan(v)) // out of range of every use (a dim, an axis, an index)
    return INT64_MIN;
  if (v >= 9.2e18)
    return INT64_MAX;
  if (v <= -9.2e18)
    return INT64_MIN;
  return static_cast<int64_t>(v);
}

std::vector<int64_t> HostTensor::ints() const {
  std::vector<int64_t> out;
  for (double d : data)
    out.push_back(toInt64(d));
  return out;
}

Type elementTypeOf(MLIRContext &ctx, int32_t t) {
  Builder b(&ctx);
  switch (t) {
  case onnx::TensorProto::FLOAT: return b.getF32Type();
  case onnx::TensorProto::DOUBLE: return b.getF64Type();
  case onnx::TensorProto::FLOAT16: return b.getF16Type();
  case onnx::TensorProto::BFLOAT16: return b.getBF16Type();
  case onnx::TensorProto::INT64: return b.getI64Type();
  case onnx::TensorProto::INT32: return b.getI32Type();
  case onnx::TensorProto::BOOL: return b.getI1Type();
  default: return nullptr;
  }
}

std::string onnxTypeName(int32_t t) {
  if (onnx::TensorProto_DataType_IsValid(t))
    return onnx::TensorProto_DataType_Name(static_cast<onnx::TensorProto_DataType>(t));
  return "type " + std::to_string(t);
}

std::string dtypeName(int32_t t) {
  switch (t) {
  case onnx::TensorProto::FLOAT: return "f32";
  case onnx::TensorProto::DOUBLE: return "f64";
  case onnx::TensorProto::FLOAT16: return "f16";
  case onnx::TensorProto::BFLOAT16: return "bf16";
  case onnx::TensorProto::INT64: return "i64";
  case onnx::TensorProto::INT32: return "i32";
  case onnx::TensorProto::BOOL: return "bool";
  default: return "";
  }
}

int64_t dtypeSize(const std::string &d) {
  if (d == "f64" || d == "i64")
    return 8;
  if (d == "f32" || d == "i32")
    return 4;
  if (d == "f16" || d == "bf16")
    return 2;
  return 1;
}

Value ImportContext::materialize(Operand &op, Location loc) {
  if (op.value)
    return op.value;
  if (!op.weight.empty()) {
    op.value = WeightOp::create(builder, loc, op.type, op.weight);
    return op.value;
  }
  // A host constant used at run time becomes an ortc.constant.
  const HostTensor &h = *op.host;
  Type elt = op.type.getElementType();
  DenseElementsAttr attr;
  if (auto ft = dyn_cast<FloatType>(elt)) {
    SmallVector<APFloat> vals;
    for (double d : h.data) {
      APFloat f(d);
      bool lost;
      f.convert(ft.getFloatSemantics(), APFloat::rmNearestTiesToEven, &lost);
      vals.push_back(f);
    }
    attr = DenseElementsAttr::get(op.type, vals);
  } else {
    unsigned width = elt.getIntOrFloatBitWidth();
    SmallVector<APInt> vals;
    for (double d : h.data)
      vals.push_back(APInt(width, static_cast<uint64_t>(toInt64(d)), /*isSigned=*/true));
    attr = DenseElementsAttr::get(op.type, vals);
  }
  op.value = ConstantOp::create(builder, loc, attr);
  return op.value;
}

//===-- NodeCtx -----------------------------------------------------------===//

bool NodeCtx::allHost() {
  for (size_t i = 0; i < numInputs(); ++i) {
    if (!has(i))
      continue;
    Operand &op = operand(i);
    if (!op.host || op.isTrainableCandidate())
      return false;
  }
  return true;
}

const onnx::AttributeProto *NodeCtx::attr(const std::string &name) const {
  for (const auto &a : node.attribute())
    if (a.name() == name)
      return &a;
  return nullptr;
}
int64_t NodeCtx::attrInt(const std::string &name, int64_t dflt) const {
  auto *a = attr(name);
  return a ? a->i() : dflt;
}
double NodeCtx::attrFloat(const std::string &name, double dflt) const {
  auto *a = attr(name);
  if (!a)
    return dflt;
  return floatAsDecimal(a->f());
}

double floatAsDecimal(double v) {
  std::ostringstream os;
  os.precision(7);
  os << static_cast<float>(v);
  return std::stod(os.str());
}
std::string NodeCtx::attrString(const std::string &name, const std::string &dflt) const {
  auto *a = attr(name);
  return a ? a->s() : dflt;
}
std::optional<std::vector<int64_t>> NodeCtx::attrInts(const std::string &name) const {
  auto *a = attr(name);
  if (!a)
    return std::nullopt;
  return std::vector<int64_t>(a->ints().begin(), a->ints().end());
}

void NodeCtx::setOutput(size_t i, Value v) {
  if (i >= (size_t)node.output_size() || node.output(i).empty())
    return;
  Operand op;
  op.value = v;
  op.type = cast<RankedTensorType>(v.getType());
  ic.values[node.output(i)] = op;
}

void NodeCtx::setOutputHost(size_t i, HostTensor t) {
  if (i >= (size_t)node.output_size() || node.output(i).empty())
    return;
  Operand op;
  op.type = RankedTensorType::get(t.shape, elementTypeOf(ic.ctx, t.elemType));
  op.host = std::move(t);
  ic.values[node.output(i)] = op;
}

LogicalResult NodeCtx::fail(const llvm::Twine &msg) {
  error = "node '" + node.name() + "' (" + node.op_type() + "): " + msg.str();
  return failure();
}

std::string shapeProblem(llvm::ArrayRef<int64_t> shape, int64_t maxElements) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0 || d > kMaxDim || (d && n > maxElements / d)) {
      std::string dims;
      for (int64_t v : shape)
        dims += (dims.empty() ? "" : ", ") + std::to_string(v);
      return "[" + dims + "] has a dim outside [0, " + std::to_string(kMaxDim) + "] or more than " +
             std::to_string(maxElements) + " elements";
    }
    n *= d;
  }
  return "";
}

LogicalResult NodeCtx::checkShape(llvm::ArrayRef<int64_t> shape, const std::string &what,
                                  int64_t maxElements) {
  std::string problem = shapeProblem(shape, maxElements);
  return problem.empty() ? success() : fail(what + " " + problem);
}

//===-- the importer ------------------------------------------------------===//

namespace {

class Importer {
public:
  Importer(MLIRContext &ctx, const std::string &path, const ImportOptions &options,
           WeightStore &weights)
      : ic(ctx, weights), path(path), options(options) {}

  OwningOpRef<ModuleOp> run(std::string &error);

private:
  ImportContext ic;
  std::string path;
  const ImportOptions &options;
  onnx::ModelProto model;
  std::vector<std::string> problems;
  /// A binary model's file, mapped: the initializers' raw data stays there
  /// (`regions[i]` for the graph's i-th initializer), out of the parsed message.
  std::shared_ptr<const FileMapping> mapping;
  std::vector<RawDataRegion> regions;
  /// External data files, mapped once each (by resolved path).
  std::map<std::string, std::shared_ptr<const FileMapping>> externalFiles;

  bool parse();
  void contractCheck(std::map<std::string, std::vector<int64_t>> &inputShapes);
  bool topoSort(std::vector<const onnx::NodeProto *> &order);
  /// Reads the graph's `index`-th initializer `t` into `out`: raw data as a view of the
  /// mapped file (or moved out of the message), typed fields converted.
  bool readInitializer(onnx::TensorProto &t, size_t index, WeightData &out);
  bool readExternal(const onnx::TensorProto &t, int64_t expected, WeightBytes &out);
  /// Parses the mapped binary model without its initializers' raw data; false if the
  /// file cannot be mapped or is not well-formed wire format (then parsed as a stream).
  bool parseMapped();
  std::string modelDir() const;
};

/// Reads a whole file with one allocation of its size (a 500 MB model once, not
/// twice through a growing stream buffer).
bool readFile(const std::string &path, std::string &out) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  if (!f)
    return false;
  std::streamoff size = f.tellg();
  if (size < 0)
    return false;
  out.resize(size_t(size));
  f.seekg(0);
  f.read(out.data(), size);
  return f.gcount() == size;
}

std::string Importer::modelDir() const {
  size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

bool Importer::parse() {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    problems.push_back("cannot open file (" + std::string(strerror(errno)) + ")");
    return false;
  }
  if (!S_ISREG(st.st_mode)) {
    problems.push_back("not a regular file");
    return false;
  }
  if (st.st_size == 0) {
    problems.push_back("file is empty");
    return false;
  }
  bool text = llvm::StringRef(path).ends_with(".onnxtxt");
  bool ok;
  std::string textError;
  if (text) {
    std::string bytes;
    if (!readFile(path, bytes)) {
      problems.push_back("cannot read file");
      return false;
    }
    // Collect the parser's first error into the message (instead of protobuf logging
    // it to stderr on its own).
    struct Collector : google::protobuf::io::ErrorCollector {
      std::string &first;
      explicit Collector(std::string &first) : first(first) {}
      void AddError(int line, google::protobuf::io::ColumnNumber column,
                    const std::string &message) override {
        if (first.empty())
          first = "line " + std::to_string(line + 1) + ":" + std::to_string(column + 1) +
                  ": " + message;
      }
    } collector(textError);
    google::protobuf::TextFormat::Parser parser;
    parser.RecordErrorsTo(&collector);
    ok = parser.ParseFromString(bytes, &model);
  } else if (parseMapped()) {
    ok = true;
  } else {
    // Parsed straight from the file in 1 MB reads: a 500 MB model is held once (in
    // the parsed message, whose raw data then moves into the WeightStore), never
    // also as a whole-file buffer.
    int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      problems.push_back("cannot read file (" + std::string(strerror(errno)) + ")");
      return false;
    }
    {
      google::protobuf::io::FileInputStream file(fd, 1 << 20);
      google::protobuf::io::CodedInputStream in(&file);
      in.SetRecursionLimit(64);
      ok = model.ParseFromCodedStream(&in) && in.ConsumedEntireMessage();
      ok = ok && file.GetErrno() == 0;
    }
    close(fd);
  }
  if (!ok || !model.has_graph() || model.graph().node_size() == 0) {
    problems.push_back(std::string("not a valid ONNX ") + (text ? "text " : "") +
                       "model (protobuf parse failed or the graph is empty)" +
                       (textError.empty() ? "" : ": " + textError));
    return false;
  }
  for (const auto &imp : model.opset_import())
    if (imp.domain().empty() || imp.domain() == "ai.onnx")
      ic.opset = imp.version();
  if (ic.opset == 0) {
    problems.push_back("model imports no default-domain opset");
    return false;
  }
  if (ic.opset < 7 || ic.opset > 28)
    problems.push_back("opset " + std::to_string(ic.opset) +
                       " is outside the supported range 7-28");
  return true;
}

/// Collects every contract violation (not just the first) into `problems`.
void Importer::contractCheck(std::map<std::string, std::vector<int64_t>> &inputShapes) {
  const auto &g = model.graph();
  std::set<std::string> inits;
  for (const auto &t : g.initializer())
    inits.insert(t.name());
  std::set<std::string> usedDims;
  for (const auto &in : g.input()) {
    if (inits.count(in.name()))
      continue;
    if (!in.type().has_tensor_type()) {
      problems.push_back("input '" + in.name() + "': not a tensor");
      continue;
    }
    const auto &tt = in.type().tensor_type();
    if (!elementTypeOf(ic.ctx, tt.elem_type()))
      problems.push_back("input '" + in.name() + "': unsupported dtype " +
                         onnxTypeName(tt.elem_type()));
    std::vector<int64_t> shape, known; // known: the dims not left dynamic
    auto given = options.shapes.find(in.name());
    if (given != options.shapes.end()) {
      shape = known = given->second;
    } else if (!tt.has_shape()) {
      problems.push_back("input '" + in.name() +
                         "': unknown rank (give it with --shape " + in.name() + "=AxB)");
      continue;
    } else {
      for (const auto &d : tt.shape().dim()) {
        if (d.has_dim_value()) {
          shape.push_back(d.dim_value());
          known.push_back(d.dim_value());
        } else if (d.has_dim_param() && options.dims.count(d.dim_param())) {
          shape.push_back(options.dims.at(d.dim_param()));
          known.push_back(shape.back());
          usedDims.insert(d.dim_param());
        } else {
          std::string name = d.has_dim_param() ? d.dim_param() : "?";
          problems.push_back("input '" + in.name() + "': dynamic dim '" + name +
                             "' (bind it with --dim " + name + "=N or --shape " +
                             in.name() + "=...)");
          shape.push_back(-1);
        }
      }
    }
    if (std::string problem = shapeProblem(known); !problem.empty())
      problems.push_back("input '" + in.name() + "': shape " + problem);
    inputShapes[in.name()] = shape;
  }
  for (const auto &[name, v] : options.dims)
    if (!usedDims.count(name)) {
      bool known = false;
      for (const auto &in : g.input())
        for (const auto &d : in.type().tensor_type().shape().dim())
          known |= d.dim_param() == name;
      if (!known)
        problems.push_back("--dim " + name + ": no input has a dim named '" + name + "'");
    }
  for (const auto &[name, v] : options.shapes) {
    bool known = false;
    for (const auto &in : g.input())
      known |= in.name() == name;
    if (!known)
      problems.push_back("--shape " + name + ": the model has no input '" + name + "'");
  }
  for (const auto &t : g.initializer())
    if (!elementTypeOf(ic.ctx, t.data_type()))
      problems.push_back("initializer '" + t.name() + "': unsupported dtype " +
                         onnxTypeName(t.data_type()));
  const auto &table = converterTable();
  for (const auto &n : g.node()) {
    std::string where = "node '" + n.name() + "' (" + n.op_type() + ")";
    if (!n.domain().empty() && n.domain() != "ai.onnx") {
      problems.push_back(where + ": op in domain '" + n.domain() + "' is not supported");
      continue;
    }
    auto it = table.find(n.op_type());
    if (it == table.end())
      problems.push_back(where + ": unsupported op " + n.op_type() + " (domain '" +
                         n.domain() + "', opset " + std::to_string(ic.opset) + ")");
    else if (ic.opset < it->second.minOpset)
      problems.push_back(where + ": needs opset >= " +
                         std::to_string(it->second.minOpset));
    if (n.op_type() == "Cast") {
      for (const auto &a : n.attribute())
        if (a.name() == "to" && !elementTypeOf(ic.ctx, a.i()))
          problems.push_back(where + ": cast to unsupported dtype " + onnxTypeName(a.i()));
    }
  }
}

bool Importer::topoSort(std::vector<const onnx::NodeProto *> &order) {
  const auto &g = model.graph();
  std::map<std::string, int> producer;
  for (int i = 0; i < g.node_size(); ++i)
    for (const auto &o : g.node(i).output())
      if (!o.empty()) {
        if (producer.count(o) || ic.values.count(o)) {
          problems.push_back("value '" + o + "' is defined more than once (node '" +
                             g.node(i).name() + "')");
          return false;
        }
        producer[o] = i;
      }
  std::vector<int> pending(g.node_size(), 0);
  std::vector<std::vector<int>> users(g.node_size());
  bool ok = true;
  for (int i = 0; i < g.node_size(); ++i)
    for (const auto &in : g.node(i).input()) {
      if (in.empty() || ic.values.count(in))
        continue;
      auto p = producer.find(in);
      if (p == producer.end()) {
        problems.push_back("node '" + g.node(i).name() + "' (" + g.node(i).op_type() +
                           "): input '" + in + "' is never defined");
        ok = false;
        continue;
      }
      ++pending[i];
      users[p->second].push_back(i);
    }
  if (!ok)
    return false;
  std::vector<int> ready;
  for (int i = g.node_size() - 1; i >= 0; --i)
    if (!pending[i])
      ready.push_back(i);
  while (!ready.empty()) {
    int i = ready.back();
    ready.pop_back();
    order.push_back(&g.node(i));
    for (int u : users[i])
      if (--pending[u] == 0)
        ready.push_back(u);
  }
  if ((int)order.size() != g.node_size()) {
    std::string names;
    for (int i = 0; i < g.node_size(); ++i)
      if (pending[i])
        names += (names.empty() ? "'" : ", '") + g.node(i).name() + "'";
    problems.push_back("the graph has a cycle through nodes " + names);
    return false;
  }
  return true;
}

bool Importer::parseMapped() {
  std::string error;
  mapping = FileMapping::open(path, error);
  std::string stripped;
  if (mapping && stripInitializerData(mapping->data(), mapping->size(), stripped, regions)) {
    google::protobuf::io::CodedInputStream in(
        reinterpret_cast<const uint8_t *>(stripped.data()), int(stripped.size()));
    in.SetRecursionLimit(64);
    model.Clear();
    if (stripped.size() < size_t(INT_MAX) && model.ParseFromCodedStream(&in) &&
        in.ConsumedEntireMessage() &&
        size_t(model.graph().initializer_size()) == regions.size())
      return true;
  }
  model.Clear();
  mapping.reset();
  regions.clear();
  return false;
}

bool Importer::readExternal(const onnx::TensorProto &t, int64_t expected,
                            WeightBytes &out) {
  std::string location;
  int64_t offset = 0, length = -1;
  for (const auto &kv : t.external_data()) {
    if (kv.key() == "location")
      location = kv.value();
    else if (kv.key() == "offset")
      offset = std::atoll(kv.value().c_str());
    else if (kv.key() == "length")
      length = std::atoll(kv.value().c_str());
  }
  std::string where = "initializer '" + t.name() + "': external data '" + location + "'";
  if (location.empty() || location[0] == '/' || location.find("..") != std::string::npos) {
    problems.push_back(where + " must be a relative path inside the model's folder");
    return false;
  }
  std::string dir = modelDir();
  std::string file = dir + "/" + location;
  struct stat st;
  if (lstat(file.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
    problems.push_back(where + " is not a regular file in the model's folder");
    return false;
  }
  char realDir[PATH_MAX], realFile[PATH_MAX];
  if (!realpath(dir.c_str(), realDir) || !realpath(file.c_str(), realFile) ||
      std::string(realFile).rfind(std::string(realDir) + "/", 0) != 0) {
    problems.push_back(where + " resolves outside the model's folder");
    return false;
  }
  if (length < 0)
    length = st.st_size - offset;
  if (offset < 0 || length != expected || offset + length > st.st_size) {
    problems.push_back(where + ": offset " + std::to_string(offset) + " + length " +
                       std::to_string(length) + " does not fit the file (" +
                       std::to_string(st.st_size) + " bytes) or the tensor (" +
                       std::to_string(expected) + " bytes)");
    return false;
  }
  if (length == 0) {
    out = WeightBytes();
    return true;
  }
  std::shared_ptr<const FileMapping> &mapped = externalFiles[realFile];
  std::string error;
  if (!mapped && !(mapped = FileMapping::open(realFile, error))) {
    problems.push_back(where + ": " + error);
    return false;
  }
  if (uint64_t(offset + length) > mapped->size()) {
    problems.push_back(where + ": the file shrank while it was read");
    return false;
  }
  out = WeightBytes(mapped, mapped->data() + offset, size_t(length));
  return true;
}

template <typename Src, typename Dst>
void appendAs(std::string &out, const Src &values) {
  for (auto v : values) {
    Dst d = static_cast<Dst>(v);
    const char *p = reinterpret_cast<const char *>(&d);
    out.insert(out.end(), p, p + sizeof(Dst));
  }
}

bool Importer::readInitializer(onnx::TensorProto &t, size_t index, WeightData &out) {
  out.dtype = dtypeName(t.data_type());
  out.shape.assign(t.dims().begin(), t.dims().end());
  if (std::string problem = shapeProblem(out.shape); !problem.empty()) {
    problems.push_back("initializer '" + t.name() + "': shape " + problem);
    return false;
  }
  int64_t n = 1;
  for (int64_t d : out.shape)
    n *= d;
  int64_t expected = n * dtypeSize(out.dtype);
  if (t.data_location() == onnx::TensorProto::EXTERNAL)
    return readExternal(t, expected, out.bytes);
  if (index < regions.size() && regions[index].present) {
    const RawDataRegion &r = regions[index];
    out.bytes = WeightBytes(mapping, mapping->data() + r.offset, r.size);
  } else if (t.has_raw_data()) {
    out.bytes = WeightBytes(std::move(*t.mutable_raw_data()));
  } else {
    std::string typed;
    switch (t.data_type()) {
    case onnx::TensorProto::FLOAT: appendAs<decltype(t.float_data()), float>(typed, t.float_data()); break;
    case onnx::TensorProto::DOUBLE: appendAs<decltype(t.double_data()), double>(typed, t.double_data()); break;
    case onnx::TensorProto::INT64: appendAs<decltype(t.int64_data()), int64_t>(typed, t.int64_data()); break;
    case onnx::TensorProto::INT32: appendAs<decltype(t.int32_data()), int32_t>(typed, t.int32_data()); break;
    case onnx::TensorProto::BOOL: appendAs<decltype(t.int32_data()), uint8_t>(typed, t.int32_data()); break;
    case onnx::TensorProto::FLOAT16:
    case onnx::TensorProto::BFLOAT16: appendAs<decltype(t.int32_data()), uint16_t>(typed, t.int32_data()); break;
    default: break;
    }
    out.bytes = WeightBytes(std::move(typed));
  }
  if ((int64_t)out.bytes.size() != expected) {
    problems.push_back("initializer '" + t.name() + "': " +
                       std::to_string(out.bytes.size()) + " bytes of data, but shape and " +
                       "dtype need " + std::to_string(expected));
    return false;
  }
  return true;
}

/// How many leading inputs an op cannot do without (converters test the optional
/// ones with NodeCtx::has before reading them).
int requiredInputs(const std::string &op, int64_t opset) {
  static const std::map<std::string, int> fixed = {
      {"Add", 2}, {"Sub", 2}, {"Mul", 2}, {"Div", 2}, {"Pow", 2}, {"Equal", 2},
      {"Less", 2}, {"Greater", 2}, {"And", 2}, {"MatMul", 2}, {"Gemm", 2}, {"Conv", 2},
      {"Where", 3}, {"Gather", 2}, {"Expand", 2}, {"Tile", 2}, {"Range", 3},
      {"BatchNormalization", 5}, {"LayerNormalization", 2}, {"SoftmaxCrossEntropyLoss", 2},
      {"Constant", 0}};
  if (auto it = fixed.find(op); it != fixed.end())
    return it->second;
  if ((op == "Reshape" && opset >= 5) || (op == "Unsqueeze" && opset >= 13) ||
      (op == "Pad" && opset >= 11))
    return 2;
  if (op == "Slice" && opset >= 10)
    return 3;
  return 1;
}

/// How many inputs a node of `op` must list at least: ONNX's own schema (its leading
/// required inputs) where libonnx knows the op, else ortc's table for ops newer than
/// libonnx. Converters read those inputs without asking whether they exist.
int leadingInputs(const std::string &op, int64_t opset) {
  static const std::map<std::string, int> newer = {{"GroupNormalization", 3}};
  if (auto it = newer.find(op); it != newer.end())
    return it->second;
  const onnx::OpSchema *schema =
      onnx::OpSchemaRegistry::Schema(op, static_cast<int>(std::min<int64_t>(opset, INT32_MAX)), "");
  return schema ? schema->min_input() : 0;
}

/// Host copy of an initializer's data (used when a shape input reads it).
HostTensor hostOf(const WeightData &w, int32_t elemType) {
  HostTensor h;
  h.elemType = elemType;
  h.shape = w.shape;
  int64_t n = numElements(w.shape);
  h.data.resize(n);
  const char *p = w.bytes.data();
  // One loop per dtype (the bytes of a mapped model need not be aligned: memcpy).
  auto convert = [&](auto zero) {
    using T = decltype(zero);
    for (int64_t i = 0; i < n; ++i) {
      T v;
      memcpy(&v, p + sizeof(T) * i, sizeof(T));
      h.data[i] = (double)v;
    }
  };
  if (w.dtype == "f32")
    convert(float());
  else if (w.dtype == "f64")
    convert(double());
  else if (w.dtype == "i64")
    convert(int64_t());
  else if (w.dtype == "i32")
    convert(int32_t());
  else if (w.dtype == "bool")
    for (int64_t i = 0; i < n; ++i)
      h.data[i] = p[i] ? 1 : 0;
  else // f16/bf16 (e.g. Clip bounds read at import time)
    for (int64_t i = 0; i < n; ++i) {
      uint16_t bits;
      memcpy(&bits, p + 2 * i, 2);
      APFloat f(w.dtype == "f16" ? APFloat::IEEEhalf() : APFloat::BFloat(), APInt(16, bits));
      h.data[i] = f.convertToDouble();
    }
  return h;
}

/// What PyTorch's dynamo exporter says a graph value is: the `kind` of its torch.export
/// input spec (PARAMETER, BUFFER, CONSTANT_TENSOR...), stored in the value's
/// `metadata_props` (field 4 of ValueInfoProto since ONNX 1.16). Debian's ONNX 1.12
/// protobuf predates the field, so it is read from the message's unknown fields.
static std::map<std::string, std::string> torchInputKinds(const onnx::GraphProto &g) {
  std::map<std::string, std::string> kinds;
  auto scan = [&](const onnx::ValueInfoProto &v) {
    const auto &unknown = v.GetReflection()->GetUnknownFields(v);
    for (int i = 0; i < unknown.field_count(); ++i) {
      const auto &f = unknown.field(i);
      if (f.number() != 4 || f.type() != google::protobuf::UnknownField::TYPE_LENGTH_DELIMITED)
        continue;
      onnx::StringStringEntryProto entry;
      if (entry.ParseFromString(f.length_delimited()) &&
          entry.key() == "pkg.torch.export.graph_signature.InputSpec.kind")
        kinds[v.name()] = entry.value();
    }
  };
  for (const auto &v : g.input())
    scan(v);
  for (const auto &v : g.value_info())
    scan(v);
  return kinds;
}

OwningOpRef<ModuleOp> Importer::run(std::string &error) {
  auto finish = [&]() -> OwningOpRef<ModuleOp> {
    error = path + ": ";
    if (problems.size() == 1) {
      error += problems[0];
    } else {
      error += std::to_string(problems.size()) + " problems:";
      for (const auto &p : problems)
        error += "\n  - " + p;
    }
    return nullptr;
  };
  if (!parse())
    return finish();
  std::map<std::string, std::vector<int64_t>> inputShapes;
  contractCheck(inputShapes);
  if (!problems.empty())
    return finish();

  MLIRContext &ctx = ic.ctx;
  OpBuilder &b = ic.builder;
  Location fileLoc = FileLineColLoc::get(&ctx, path, 0, 0);
  OwningOpRef<ModuleOp> module = ModuleOp::create(fileLoc);
  b.setInsertionPointToEnd(module->getBody());

  // Initializers: globals plus a host copy for import-time folding of shape inputs.
  const auto &g = model.graph();
  std::map<std::string, std::string> torchKinds = torchInputKinds(g);
  for (int index = 0; index < g.initializer_size(); ++index) {
    onnx::TensorProto &t = *model.mutable_graph()->mutable_initializer(index);
    if (ic.values.count(t.name())) {
      problems.push_back("initializer '" + t.name() + "' is defined twice");
      continue;
    }
    WeightData w;
    if (!readInitializer(t, size_t(index), w))
      continue;
    auto type = RankedTensorType::get(w.shape, elementTypeOf(ctx, t.data_type()));
    auto global = GlobalOp::create(b, NameLoc::get(b.getStringAttr(t.name()), fileLoc),
                                   t.name(), type, "weight", t.name());
    if (auto it = torchKinds.find(t.name()); it != torchKinds.end())
      global->setAttr("torch_kind", b.getStringAttr(it->second));
    Operand op;
    op.weight = t.name();
    op.type = type;
    if (numElements(w.shape) <= (int64_t(1) << 20))
      op.host = hostOf(w, t.data_type());
    ic.values[t.name()] = op;
    ic.weights[t.name()] = std::move(w);
  }
  if (!problems.empty())
    return finish();

  // Graph inputs become arguments of @forward (plus the dropout seed if needed).
  SmallVector<Type> argTypes;
  SmallVector<std::string> argNames;
  for (const auto &in : g.input()) {
    if (ic.values.count(in.name()))
      continue; // an initializer listed as input (old exporters)
    auto type = RankedTensorType::get(inputShapes[in.name()],
                                      elementTypeOf(ctx, in.type().tensor_type().elem_type()));
    argTypes.push_back(type);
    argNames.push_back(in.name());
  }
  // Ops that draw from ortc's counter-based RNG read the step's seed.
  bool hasDropout = llvm::any_of(g.node(), [](const onnx::NodeProto &n) {
    return llvm::is_contained({"Dropout", "RandomUniformLike", "RandomUniform",
                               "RandomNormalLike", "RandomNormal", "Bernoulli"},
                              n.op_type());
  });
  if (hasDropout) {
    argTypes.push_back(RankedTensorType::get({}, b.getI64Type()));
    argNames.push_back("seed");
  }
  auto func = func::FuncOp::create(b, fileLoc, "forward", b.getFunctionType(argTypes, {}));
  Block *entry = func.addEntryBlock();
  for (auto [i, name] : llvm::enumerate(argNames)) {
    func.setArgAttr(i, "ortc.name", b.getStringAttr(name));
    if (name == "seed" && hasDropout && i + 1 == argNames.size()) {
      func.setArgAttr(i, "ortc.role", b.getStringAttr("scalar"));
      ic.seed = entry->getArgument(i);
      continue;
    }
    Operand op;
    op.value = entry->getArgument(i);
    op.type = cast<RankedTensorType>(argTypes[i]);
    ic.values[name] = op;
  }
  b.setInsertionPointToEnd(entry);

  for (const auto &n : g.node())
    for (const auto &in : n.input())
      ic.used.insert(in);
  for (const auto &out : g.output())
    ic.used.insert(out.name());
  std::vector<const onnx::NodeProto *> order;
  if (!topoSort(order))
    return finish();
  const auto &table = converterTable();
  std::string shapeDiag;
  ScopedDiagnosticHandler convHandler(&ctx, [&](Diagnostic &d) {
    shapeDiag = d.str();
    return success();
  });
  for (const onnx::NodeProto *node : order) {
    std::string name = node->name().empty() ? node->op_type() : node->name();
    NodeCtx nc(ic, *node, NameLoc::get(b.getStringAttr(name), fileLoc));
    for (const auto &in : node->input())
      if (!in.empty() && !ic.values.count(in)) {
        problems.push_back("node '" + name + "' (" + node->op_type() + "): input '" + in +
                           "' comes from an output ortc does not compute");
        return finish();
      }
    bool variadic = llvm::is_contained({"Concat", "Min", "Max", "Sum"}, node->op_type());
    int required = variadic ? std::max(node->input_size(), 1)
                            : requiredInputs(node->op_type(), ic.opset);
    for (int i = 0; i < required; ++i)
      if (i >= node->input_size() || node->input(i).empty()) {
        problems.push_back("node '" + name + "' (" + node->op_type() + "): input " +
                           std::to_string(i) + " is required but missing");
        return finish();
      }
    if (int leading = leadingInputs(node->op_type(), ic.opset); node->input_size() < leading) {
      problems.push_back("node '" + name + "' (" + node->op_type() + ") needs at least " +
                         std::to_string(leading) + " inputs, has " +
                         std::to_string(node->input_size()));
      return finish();
    }
    if (node->output_size() == 0) { // every ONNX op has one; converters write output 0
      problems.push_back("node '" + name + "' (" + node->op_type() + ") has no outputs");
      return finish();
    }
    if (failed(table.at(node->op_type()).fn(nc))) {
      std::string msg = nc.error.empty() ? "node '" + name + "' (" + node->op_type() +
                                               "): conversion failed"
                                         : nc.error;
      if (!shapeDiag.empty())
        msg += ": " + shapeDiag;
      problems.push_back(msg);
      return finish();
    }
    for (const auto &o : node->output())
      if (!o.empty() && !ic.values.count(o) && &o == &node->output(0)) {
        problems.push_back("node '" + name + "': produced no value for '" + o + "'");
        return finish();
      }
  }

  SmallVector<Value> results;
  SmallVector<std::string> resultNames;
  for (const auto &out : g.output()) {
    auto it = ic.values.find(out.name());
    if (it == ic.values.end()) {
      problems.push_back("graph output '" + out.name() + "' is never computed");
      continue;
    }
    results.push_back(ic.materialize(it->second, fileLoc));
    resultNames.push_back(out.name());
  }
  if (!problems.empty())
    return finish();
  func::ReturnOp::create(b, fileLoc, results);
  func.setType(b.getFunctionType(argTypes, ValueRange(results).getTypes()));
  for (auto [i, name] : llvm::enumerate(resultNames))
    func.setResultAttr(i, "ortc.name", b.getStringAttr(name));

  // Anything the converters built must verify; a failure here is an importer bug
  // or an inconsistent model, reported with the op's location.
  std::string diag;
  {
    ScopedDiagnosticHandler handler(&ctx, [&](Diagnostic &d) {
      llvm::raw_string_ostream os(diag);
      os << d.getLocation() << ": " << d.str() << "\n";
      return success();
    });
    if (failed(verify(*module))) {
      problems.push_back("the imported IR does not verify: " + diag);
      return finish();
    }
  }
  if (options.inferenceGraph) {
    onnx::ModelProto copy = model; // the initializers' data already lives in the store
    for (onnx::TensorProto &t : *copy.mutable_graph()->mutable_initializer())
      clearTensorData(t);
    copy.SerializeToString(options.inferenceGraph);
  }
  return module;
}

} // namespace

OwningOpRef<ModuleOp> importOnnxModel(MLIRContext &ctx, const std::string &path,
                                      const ImportOptions &options, WeightStore &weights,
                                      std::string &error) {
  ctx.loadDialect<OrtcDialect, func::FuncDialect>();
  Importer importer(ctx, path, options, weights);
  return importer.run(error);
}

} // namespace ortc
