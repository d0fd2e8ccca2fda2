//===- OrtcPython.cpp - The `ortc` Python module over the runtime's C API --===//
//
// Why: PyTorch users drive training steps from Python. This module wraps the C API
// (ortc/runtime.h) and nothing else, so a Python session behaves exactly like
// `ortc train`: same kernels, same scalars, same checkpoints. It needs numpy only, not
// PyTorch. Tensors come back as numpy arrays that view the session's own storage
// (zero copy; the array keeps the session alive); feeds are copied in, converted to the
// tensor's dtype the way numpy's astype would.
//
//===----------------------------------------------------------------------===//
#include "ortc/runtime.h"

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace py = pybind11;

namespace {

[[noreturn]] void raise() { throw std::runtime_error(ortc_last_error()); }

void check(ortc_status s) {
  if (s != ORTC_OK)
    raise();
}

/// numpy's dtype of a manifest dtype (bf16 travels as uint16, as in .npz files).
py::dtype numpyDtype(const std::string &d) {
  static const std::map<std::string, const char *> names{
      {"f32", "float32"}, {"f64", "float64"}, {"i64", "int64"}, {"i32", "int32"},
      {"bool", "bool"},   {"f16", "float16"}, {"bf16", "uint16"}, {"u8", "uint8"}};
  auto it = names.find(d);
  if (it == names.end())
    throw std::runtime_error("tensor dtype '" + d + "' has no numpy equivalent");
  return py::dtype(it->second);
}

struct Artifact {
  std::shared_ptr<ortc_artifact> ptr;

  Artifact(const std::string &path, int threads) {
    ortc_artifact *a = nullptr;
    check(ortc_artifact_load(path.c_str(), &a));
    ptr.reset(a, ortc_artifact_free);
    check(ortc_artifact_set_threads(a, threads));
  }
  std::string device() const { return ortc_artifact_device(ptr.get()); }
};

struct TensorMeta {
  int64_t index;
  std::string name, role, dtype;
  std::vector<ssize_t> shape;
};

class Session {
public:
  explicit Session(const Artifact &artifact) : artifact(artifact.ptr) {
    ortc_session *s = nullptr;
    check(ortc_session_create(artifact.ptr.get(), &s));
    session.reset(s, ortc_session_free);
  }

  TensorMeta meta(const std::string &name) const {
    int64_t i = ortc_tensor_find(session.get(), name.c_str());
    if (i < 0)
      throw py::key_error("no tensor '" + name + "' in the artifact");
    const char *n, *role, *dtype;
    int64_t rank;
    const int64_t *dims;
    check(ortc_tensor_info(session.get(), i, &n, &role, &dtype, &rank, &dims));
    return {i, n, role, dtype, std::vector<ssize_t>(dims, dims + rank)};
  }

  /// A numpy array over the tensor's storage; `owner` (the Python session) stays alive
  /// as long as the array.
  py::array view(const std::string &name, py::object owner) {
    TensorMeta m = meta(name);
    void *data = ortc_tensor_data(session.get(), m.index);
    return py::array(numpyDtype(m.dtype), m.shape, data, owner);
  }

  void bind(const std::string &name, py::handle value) {
    TensorMeta m = meta(name);
    // numpy.asarray(value, dtype) in C order (ascontiguousarray would make a scalar 1-d).
    py::module_ np = py::module_::import("numpy");
    py::array want = np.attr("require")(np.attr("asarray")(value, numpyDtype(m.dtype)),
                                        py::none(), "C");
    std::vector<ssize_t> shape(want.shape(), want.shape() + want.ndim());
    if (shape != m.shape)
      throw py::value_error("feed '" + name + "' has shape " + shapeText(shape) +
                            ", the model's input is " + shapeText(m.shape));
    check(ortc_bind_input(session.get(), name.c_str(), want.data(), size_t(want.nbytes())));
  }

  /// Binds `feeds` and the scalars the train loop sets, runs `function`, returns its
  /// outputs (copies) by name.
  py::dict run(const std::string &function, const py::dict &feeds, const py::dict &scalars) {
    for (auto item : feeds)
      bind(py::str(item.first), item.second);
    for (auto item : scalars) { // only those the artifact has
      std::string name = py::str(item.first);
      int64_t i = ortc_tensor_find(session.get(), name.c_str());
      if (i >= 0 && meta(name).role == "scalar")
        bind(name, item.second);
    }
    check(ortc_run(session.get(), function.c_str()));
    py::dict out;
    int64_t n = ortc_function_output_count(session.get(), function.c_str());
    for (int64_t i = 0; i < n; ++i) {
      std::string name = ortc_function_output(session.get(), function.c_str(), i);
      TensorMeta m = meta(name);
      py::array a(numpyDtype(m.dtype), m.shape);
      check(ortc_read_output(session.get(), name.c_str(), a.mutable_data(), size_t(a.nbytes())));
      out[py::str(name)] = m.shape.empty() ? py::object(a.attr("item")()) : py::object(a);
    }
    return out;
  }

  std::vector<std::string> names(unsigned roles) const {
    std::vector<std::string> out;
    for (int64_t i = 0; i < ortc_tensor_count(session.get()); ++i) {
      const char *n, *role;
      check(ortc_tensor_info(session.get(), i, &n, &role, nullptr, nullptr, nullptr));
      std::string r = role;
      if (((roles & ORTC_ROLE_PARAMETER) && r == "parameter") ||
          ((roles & ORTC_ROLE_BUFFER) && r == "buffer") ||
          ((roles & ORTC_ROLE_STATE) && r == "state"))
        out.push_back(n);
    }
    return out;
  }

  std::vector<std::string> functionInputs(const std::string &fn) const {
    std::vector<std::string> out;
    for (int64_t i = 0; i < ortc_function_input_count(session.get(), fn.c_str()); ++i)
      out.push_back(ortc_function_input(session.get(), fn.c_str(), i));
    return out;
  }

  ortc_session *get() const { return session.get(); }

private:
  std::shared_ptr<ortc_artifact> artifact; // outlives the session
  std::shared_ptr<ortc_session> session;

  static std::string shapeText(const std::vector<ssize_t> &s) {
    std::string t = "[";
    for (size_t i = 0; i < s.size(); ++i)
      t += (i ? ", " : "") + std::to_string(s[i]);
    return t + "]";
  }
};

} // namespace

PYBIND11_MODULE(ortc, m) {
  m.doc() = "Load an ortc artifact (model.ortc/) and run its training and eval steps.";
  py::class_<Artifact>(m, "Artifact")
      .def(py::init<const std::string &, int>(), py::arg("path"), py::arg("threads") = 0,
           "Loads and checks an artifact folder; threads <= 0: ORTC_THREADS, else one per core")
      .def_property_readonly("device", &Artifact::device)
      .def("session", [](const Artifact &a) { return Session(a); });

  py::class_<Session>(m, "Session")
      .def(py::init<const Artifact &>())
      .def(
          "step",
          [](Session &s, const py::dict &feeds, double lr, int64_t seed, double gradScale) {
            py::dict scalars;
            scalars["lr"] = lr;
            scalars["seed"] = seed;
            scalars["grad_scale"] = gradScale;
            return s.run("train_step", feeds, scalars);
          },
          py::arg("feeds"), py::arg("lr") = 0.01, py::arg("seed") = 0,
          py::arg("grad_scale") = 1.0,
          "One train_step on the feeds (input name -> array): returns its outputs "
          "(loss, finite). A step that is not finite changed nothing.")
      .def(
          "accumulate",
          [](Session &s, const py::dict &feeds, int64_t seed) {
            py::dict scalars;
            scalars["seed"] = seed;
            return s.run("accumulate_step", feeds, scalars);
          },
          py::arg("feeds"), py::arg("seed") = 0,
          "accumulate_step (artifacts built with --grad-accum): adds this micro-batch's "
          "gradients; the next step() with grad_scale=1/N applies them")
      .def(
          "eval",
          [](Session &s, const py::dict &feeds) { return s.run("eval_step", feeds, py::dict()); },
          py::arg("feeds"), "eval_step: the loss (and correct/counted for classification)")
      .def(
          "set_scalar",
          [](Session &s, const std::string &name, double value) {
            if (s.meta(name).role != "scalar")
              throw py::value_error("'" + name + "' is not a scalar of the artifact");
            s.bind(name, py::float_(value));
          },
          py::arg("name"), py::arg("value"),
          "Sets a run-time scalar (AdamW's beta1, beta2, eps, weight_decay) for later steps")
      .def("inputs", &Session::functionInputs, py::arg("function") = "train_step")
      .def(
          "tensor", [](py::object self, const std::string &name) {
            return self.cast<Session &>().view(name, self);
          },
          py::arg("name"), "The tensor's storage as a numpy array (no copy)")
      .def(
          "parameters",
          [](py::object self, bool withState) {
            Session &s = self.cast<Session &>();
            py::dict out;
            for (const std::string &n :
                 s.names(ORTC_ROLES_PARAMS | (withState ? ORTC_ROLE_STATE : 0)))
              out[py::str(n)] = s.view(n, self);
            return out;
          },
          py::arg("state") = false,
          "Parameters and buffers (and optimizer state) as numpy views of the session")
      .def(
          "set_parameters",
          [](py::object self, const py::dict &values) {
            Session &s = self.cast<Session &>();
            for (auto item : values) {
              std::string name = py::str(item.first);
              py::array dst = s.view(name, self);
              py::module_::import("numpy").attr("copyto")(dst, item.second);
            }
          },
          py::arg("values"), "Copies arrays into parameters/buffers/state by name")
      .def("save_checkpoint",
           [](Session &s, const std::string &p) { check(ortc_checkpoint_save(s.get(), p.c_str())); })
      .def("load_checkpoint",
           [](Session &s, const std::string &p) { check(ortc_checkpoint_load(s.get(), p.c_str())); })
      .def("save_params",
           [](Session &s, const std::string &p) {
             check(ortc_save_params_npz(s.get(), p.c_str(), ORTC_ROLES_PARAMS));
           })
      .def("load_params", [](Session &s, const std::string &p) {
        check(ortc_load_params_npz(s.get(), p.c_str(), ORTC_ROLES_PARAMS));
      });
}
