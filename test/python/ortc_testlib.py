# Shared scaffolding of the Python numerics tests: where the tools are, how to run them,
# and how to make a sample comparable with PyTorch (Dropout off, same weights).
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import numpy_helper

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("ORTC_BUILD", os.path.join(ROOT, "build"))
ORTC = os.path.join(BUILD, "tools", "ortc", "ortc")
ORTC_RUN = os.path.join(BUILD, "runtime", "ortc-run")
SAMPLES = ["mlp", "cnn", "gpt2", "bert"]
# Generated kernels are compiled once per distinct source and at low optimisation.
ENV = dict(os.environ, ORTC_KERNEL_CACHE=os.path.join(BUILD, "kernel-cache"), ORTC_CXX_OPT="-O1")


# Data-parallel runs (mpirun, Open MPI): as root Open MPI wants --allow-run-as-root;
# containers often forbid the cross-memory attach its shared-memory transport tries first,
# and a machine with fewer cores than ranks (or hyperthreads counted as one core) needs
# oversubscription.
MPI_ENV = dict(ENV, OMPI_MCA_btl_vader_single_copy_mechanism="none",
               OMPI_MCA_rmaps_base_oversubscribe="1")


def mpirun(ranks, args, check=True, env=None, timeout=600):
    """`mpirun -np RANKS ARGS` in MPI_ENV (or `env`); raises with its output when it fails
    and `check`."""
    cmd = ["mpirun", "--allow-run-as-root", "-np", str(ranks)] + list(args)
    p = subprocess.run(cmd, capture_output=True, text=True, env=env or MPI_ENV, timeout=timeout)
    if check and p.returncode != 0:
        raise AssertionError("%s failed (%d):\n%s\n%s" % (" ".join(cmd), p.returncode, p.stdout, p.stderr))
    return p


def log_losses(path):
    """The loss of every step record of a --log-json file, in order."""
    with open(path) as f:
        return [r["loss"] for r in map(json.loads, f) if "loss" in r]


def free_port():
    """A TCP port nothing listens on now (for a rendezvous)."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(ranks, args, check=True, env=None, timeout=600):
    """ARGS started RANKS times as torchrun starts its workers (RANK, WORLD_SIZE, LOCAL_RANK,
    LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT; no MPI); returns their (returncode, output)
    in rank order; raises with the outputs when one fails and `check`."""
    port = free_port()
    procs = []
    for r in range(ranks):
        e = dict(env or ENV, RANK=str(r), WORLD_SIZE=str(ranks), LOCAL_RANK=str(r),
                 LOCAL_WORLD_SIZE=str(ranks), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        procs.append(subprocess.Popen(args, env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    results = []
    for p in procs:
        try:
            out, _ = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
        results.append((p.returncode, out))
    if check and any(rc != 0 for rc, _ in results):
        raise AssertionError("%s on %d torchrun-style ranks failed:\n%s" % (" ".join(args), ranks, "\n".join(
            "rank %d (exit %d):\n%s" % (r, rc, out) for r, (rc, out) in enumerate(results))))
    return results


def run(cmd, env=None, **kw):
    """Runs a command (in ENV unless `env`); raises with its output when it fails."""
    p = subprocess.run(cmd, capture_output=True, text=True, env=env or ENV, **kw)
    if p.returncode != 0:
        raise AssertionError("%s failed (%d):\n%s\n%s" % (" ".join(cmd), p.returncode, p.stdout, p.stderr))
    return p


def sample_path(name):
    return os.path.join(ROOT, "samples", name, name + ".onnx")


def without_dropout(name, out_dir):
    """A copy of a sample whose Dropout ratios are 0, so it computes what PyTorch computes
    with p=0 (the two frameworks' dropout RNGs differ by design)."""
    m = onnx.load(sample_path(name))
    ratio_names = {n.input[1] for n in m.graph.node if n.op_type == "Dropout" and len(n.input) > 1}
    for n in m.graph.node:
        if n.op_type == "Constant" and n.output[0] in ratio_names:
            for a in n.attribute:
                if a.name == "value":
                    a.t.CopyFrom(numpy_helper.from_array(np.array(0.0, dtype=np.float32)))
    for init in m.graph.initializer:
        if init.name in ratio_names:
            init.CopyFrom(numpy_helper.from_array(np.array(0.0, dtype=np.float32), init.name))
    path = os.path.join(out_dir, name + ".onnx")
    onnx.save(m, path)
    return path


def reference(name, out_dir, *args):
    """Runs samples/reference.py (PyTorch) and loads its .npz."""
    path = os.path.join(out_dir, "ref.npz")
    run([sys.executable, os.path.join(ROOT, "samples", "reference.py"), name, "0", path] + list(args))
    return dict(np.load(path))


def feed_of(ref):
    """The batch arrays of a reference file (inputs and labels)."""
    return {k: v for k, v in ref.items() if "/" not in k and k not in ("loss_0", "losses", "meta", "trainable")}


def rel_err(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


class TempDir:
    def __enter__(self):
        self.t = tempfile.TemporaryDirectory(prefix="ortc-test-")
        return self.t.name

    def __exit__(self, *exc):
        self.t.cleanup()


# The oracle of every end-to-end numerics test is PyTorch's float64 run. ortc's float32 must be
# as near it as PyTorch's own float32 run is, with 3x slack and a plain floor:
#   per step:   |L - L64| / max(|L64|, 1e-3)        <= max(LOSS_FLOOR, 3 * PyTorch f32's)
#   per tensor: ||dp - dp64|| / ||dp64||, dp = p_N - p_0  <= max(UPDATE_FLOOR, 3 * PyTorch f32's)
LOSS_FLOOR, UPDATE_FLOOR, SLACK = 1e-4, 2e-3, 3.0


def loss_err(got, want64):
    return abs(float(got) - float(want64)) / max(abs(float(want64)), 1e-3)


def check_oracle(losses, losses64, losses32, updates, updates64, updates32, what=""):
    """Judges ortc's run against PyTorch float64 with PyTorch float32 as the yardstick.
    losses*: per-step losses; updates*: {tensor name: p_N - p_0}. `updates` may name a subset
    of updates64 (tensors left out of the comparison); each must be present in the others.
    Returns a list of failure messages (empty when ortc is within the oracle) and a summary
    {"loss": worst ortc/allowed ratio info, ...} for printing."""
    failures, worst = [], {"loss": 0.0, "update": 0.0, "loss32": 0.0, "update32": 0.0}
    if len(losses) != len(losses64):
        return ["%s: %d losses, want %d" % (what, len(losses), len(losses64))], worst
    for i, (l, l64, l32) in enumerate(zip(losses, losses64, losses32)):
        e, e32 = loss_err(l, l64), loss_err(l32, l64)
        worst["loss"], worst["loss32"] = max(worst["loss"], e), max(worst["loss32"], e32)
        if not e <= max(LOSS_FLOOR, SLACK * e32):
            failures.append("%s step %d: loss %r is %.2e from float64 %r (PyTorch float32: %.2e)"
                            % (what, i + 1, l, e, l64, e32))
    for name, dp in updates.items():
        e, e32 = rel_err(dp, updates64[name]), rel_err(updates32[name], updates64[name])
        worst["update"], worst["update32"] = max(worst["update"], e), max(worst["update32"], e32)
        if not e <= max(UPDATE_FLOOR, SLACK * e32):
            failures.append("%s: update of '%s' is %.2e from float64 (PyTorch float32: %.2e)"
                            % (what, name, e, e32))
    return failures, worst


def updates_vs_reference(ref, ref32, trained, adamw):
    """The parameter updates over a run (p_N - p_0) of ortc's `trained` parameters and of
    samples/reference.py's float64 `ref` and float32 `ref32` runs, for check_oracle; raises
    KeyError naming a parameter ortc did not save. Parameters whose gradient is zero in
    exact arithmetic (a conv bias right before BatchNorm, BERT's key bias) are left out:
    every float32 run sees only rounding noise there, and AdamW (`adamw`) turns noise into
    full-size steps, so their updates (and, through the bias, the BatchNorm running
    means) are not compared."""
    noise_only = [k[len("grad/"):] for k in ref if k.startswith("grad/")
                  and np.abs(ref[k]).max() < 1e-9 * max(1.0, np.abs(ref["init/" + k[5:]]).max())]
    upd, upd64, upd32 = {}, {}, {}
    for key in ref:
        if not key.startswith("final/"):
            continue
        pname = key[len("final/"):]
        if pname not in trained:
            raise KeyError("ortc did not save '%s'" % pname)
        if pname in noise_only or (adamw and noise_only and pname.endswith("running_mean")):
            continue
        p0 = ref["init/" + pname].astype(np.float64)
        upd[pname] = trained[pname] - p0
        upd64[pname] = ref[key] - p0
        upd32[pname] = ref32[key] - p0
    return upd, upd64, upd32


def torch_sgd_run(model, x, labels, dtype, steps, lr, lr_lambda=None):
    """Per-step losses and final parameters (float64 numpy) of `steps` plain SGD steps of a
    copy of `model` in `dtype`, cross-entropy on its logits: a model's float64 oracle run and
    PyTorch's float32 run. lr_lambda(step) scales lr through torch's LambdaLR."""
    import copy
    import torch
    import torch.nn.functional as F
    model = copy.deepcopy(model).to(dtype).train()
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda) if lr_lambda else None
    xt, yt = torch.from_numpy(x).to(dtype), torch.from_numpy(labels)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = F.cross_entropy(model(xt), yt)
        loss.backward()
        opt.step()
        if sched:
            sched.step()
        losses.append(loss.item())
    return losses, {k: v.detach().double().numpy() for k, v in model.named_parameters()}


def check_sgd_vs_torch(test, model, x, labels, steps, lr, what, expect_ops=(), build_flags=(), env=None,
                       on_artifact=None, train_flags=(), lr_lambda=None):
    """Trains `model` (cross-entropy on its logits, plain SGD) in PyTorch float64 and float32
    and, exported by torch.onnx at opset 17 in training mode, with ortc on the CPU target (or
    the one `build_flags` name, built and trained in `env`); asserts (on unittest case `test`)
    that the export holds `expect_ops`, that ortc trains PyTorch's parameters and that it meets
    check_oracle on every loss and update. on_artifact(artifact, folder) runs after training;
    train_flags go to `ortc train`, and lr_lambda is their schedule as torch's LambdaLR sees it."""
    import warnings
    import torch
    init = {k: v.detach().double().numpy() for k, v in model.named_parameters()}
    losses64, final64 = torch_sgd_run(model, x, labels, torch.float64, steps, lr, lr_lambda)
    losses32, final32 = torch_sgd_run(model, x, labels, torch.float32, steps, lr, lr_lambda)
    with TempDir() as d:
        onnx_path = os.path.join(d, "model.onnx")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(model, torch.from_numpy(x), onnx_path, opset_version=17,
                              training=torch.onnx.TrainingMode.TRAINING,
                              do_constant_folding=False, input_names=["x"],
                              output_names=["logits"])
        ops = {n.op_type for n in onnx.load(onnx_path).graph.node}
        for op in expect_ops:
            test.assertIn(op, ops, "the export has no %s" % op)
        art = os.path.join(d, "m.ortc")
        run([ORTC, "build", onnx_path, "-o", art, "--optimizer", "sgd"] + list(build_flags), env=env)
        np.savez(os.path.join(d, "feed.npz"), x=x, labels=labels)
        log, params = os.path.join(d, "log.jsonl"), os.path.join(d, "p.npz")
        run([ORTC, "train", art, "--data", os.path.join(d, "feed.npz"), "--steps", str(steps),
             "--lr", str(lr), "--log-json", log, "--save-params", params] + list(train_flags),
            env=env)
        losses = log_losses(log)
        trained = dict(np.load(params))
        if on_artifact:
            on_artifact(art, d)
    test.assertEqual(sorted(trained), sorted(init), "ortc's parameters are not PyTorch's")
    upd = {k: trained[k].astype(np.float64) - init[k] for k in init}
    upd64 = {k: final64[k] - init[k] for k in init}
    upd32 = {k: final32[k] - init[k] for k in init}
    failures, worst = check_oracle(losses, losses64, losses32, upd, upd64, upd32, what)
    print("%s: worst loss err %.1e (torch f32 %.1e), update err %.1e (torch f32 %.1e)"
          % (what, worst["loss"], worst["loss32"], worst["update"], worst["update32"]))
    test.assertFalse(failures, "\n".join(failures))


REPORT_SCHEMA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "schemas",
                      "build-report.schema.json")


def schema_problems(value, schema, path="report"):
    """The subset of JSON Schema that schemas/build-report.schema.json uses (type, const,
    enum, minimum, required, properties, additionalProperties, items); [] when it holds."""
    types = {"object": dict, "array": list, "string": str, "boolean": bool,
             "integer": int, "number": (int, float)}
    t = schema.get("type")
    if t and (not isinstance(value, types[t]) or (t in ("integer", "number") and isinstance(value, bool))):
        return ["%s: not %s" % (path, t)]
    out = []
    if "const" in schema and value != schema["const"]:
        out.append("%s: %r is not %r" % (path, value, schema["const"]))
    if "enum" in schema and value not in schema["enum"]:
        out.append("%s: %r not in %r" % (path, value, schema["enum"]))
    if "minimum" in schema and value < schema["minimum"]:
        out.append("%s: %r below %r" % (path, value, schema["minimum"]))
    if isinstance(value, dict):
        out += ["%s: missing %s" % (path, k) for k in schema.get("required", []) if k not in value]
        for k, v in value.items():
            sub = schema.get("properties", {}).get(k, schema.get("additionalProperties"))
            if isinstance(sub, dict):
                out += schema_problems(v, sub, path + "." + k)
    if isinstance(value, list) and "items" in schema:
        for i, v in enumerate(value):
            out += schema_problems(v, schema["items"], "%s[%d]" % (path, i))
    return out


def random_feed(artifact, path, steps):
    """`steps` batches for the train step's inputs of `artifact` into `path` (.npz): floats in
    [-1, 1), integers in {0, 1} (labels and token ids every model accepts)."""
    with open(os.path.join(artifact, "manifest.json")) as f:
        m = json.load(f)
    wanted = set(m["functions"]["train_step"]["inputs"])
    rs = np.random.RandomState(3)
    feed = {}
    for t in m["tensors"]:
        if t["role"] != "input" or t["name"] not in wanted:
            continue
        shape = [steps] + t["shape"]
        feed[t["name"]] = (rs.uniform(-1, 1, shape).astype(np.float32) if t["dtype"] == "f32"
                           else rs.randint(0, 2, shape).astype(np.int64))
    np.savez(path, **feed)
