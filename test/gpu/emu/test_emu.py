# Why: the CUDA and ROCm targets' generated code must run somewhere in CI. These tests build
# models with `ortc build --target cuda|rocm` through the emulated device's compiler driver
# (emu_cc.py) and train them with the real runtime on the emulated device (warp 32 for cuda,
# 64 for rocm), judged by the project's float oracle: the samples against PyTorch's float64
# run (ortc_testlib.check_oracle), the zoo models against their float64 fixtures
# (test_zoo.oracle). The planted-defect tests prove the emulator's checks fire.
#
# Environment: ORTC_BUILD (default build/), EMU_ONLY (comma-separated case names: zoo files or
# samples), EMU_JOBS (cases at once, default 2).
import json
import os
import re
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from concurrent.futures import ThreadPoolExecutor

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
sys.path.insert(0, os.path.join(ROOT, "test", "python"))
sys.path.insert(0, os.path.join(ROOT, "test", "zoo"))
import ortc_testlib as tl  # noqa: E402
import test_zoo  # noqa: E402

EMU = os.path.join(tl.BUILD, "test", "gpu", "emu")
STEPS = 5
TORCH_LOCK = threading.Lock()
TARGETS = ("cuda", "rocm")
# Emulated flavours: ortc's --target, extra build flags, the emulator's environment. rdna:
# the rocm target built for gfx1100 (wave32) and run on an emulated gfx1100.
FLAVOURS = {"cuda": ("cuda", [], {}), "rocm": ("rocm", [], {}),
            "rdna": ("rocm", ["--arch", "gfx1100"], {"ORTC_EMU_ARCH": "gfx1100"})}
# Trained on the rdna flavour too (wave32 reductions of a transformer, a CNN with BatchNorm and
# a recurrent net), few enough to keep the emu label within 10 minutes.
RDNA_SAMPLES = ("gpt2", "cnn")
RDNA_ZOO = ("lstm.dynamo",)
# Library kernels that only data-parallel steps launch: EmulatedDataParallel runs them (its
# 2-rank runs meet the float64 oracle only if divideKernel turns the all-reduced sums into means).
# reduce16Kernel: only --accum-dtype chunked16|plain16 builds launch it (EmulatedTrainingRun's
# 16-bit accumulation run checks it against the CPU target's sums).
ELSEWHERE = {"divideKernel", "reduce16Kernel"}
# Also trained with SGD (momentum, weight decay) and graph replay off.
SGD_NO_GRAPHS = ("gpt2", "cnn")


def emu_env(extra=None):
    env = dict(tl.ENV, ORTC_NVCC=os.path.join(EMU, "emu-cuda"), ORTC_HIPCC=os.path.join(EMU, "emu-hip"))
    env.update(extra or {})
    return env


def run(cmd, env=None, expect=0):
    p = subprocess.run(cmd, capture_output=True, text=True, env=env or emu_env())
    if expect is not None and p.returncode != expect:
        raise AssertionError("%s exited %d (want %d):\n%s\n%s" % (" ".join(cmd), p.returncode, expect,
                                                                  p.stdout[-3000:], p.stderr[-6000:]))
    return p


def flavour_env(target):
    return emu_env(FLAVOURS.get(target, (None, [], {}))[2])


def build(model, out, target, flags, env=None):
    ortc_target, extra, _ = FLAVOURS.get(target, (target, [], {}))
    run([tl.ORTC, "build", model, "-o", out, "--target", ortc_target] + extra + list(flags),
        env=env or flavour_env(target))
    return out


KERNEL_DEF = re.compile(r"__global__\s+void\s+(?:ORTC_LAUNCH_BOUNDS\(\w+\)\s+)?(\w+)\s*\(")


def kernel_coverage(art, stats_path):
    """(kernels the artifact's source defines, kernels launched) by name, template
    arguments dropped; the launches come from the emulator's ORTC_EMU_STATS file."""
    src = [f for f in os.listdir(art) if f in ("kernels.cu", "kernels.hip")]
    with open(os.path.join(art, src[0])) as f:
        emitted = set(KERNEL_DEF.findall(f.read()))
    with open(stats_path) as f:
        launched = {k.split(" ")[0].split("<")[0] for k in json.load(f)["launches"]}
    return emitted, launched


def train(art, feed, lr, work, tag, extra=(), env=None, steps=STEPS):
    """Trains (and evaluates, so that eval_step's kernels run too); records the
    launched kernels in `work/tag-stats.json`."""
    log, params = os.path.join(work, tag + ".jsonl"), os.path.join(work, tag + ".npz")
    env = dict(env or emu_env(), ORTC_EMU_STATS=os.path.join(work, tag + "-stats.json"))
    run([tl.ORTC_RUN, "train", art, "--data", feed, "--steps", str(steps), "--lr", repr(lr), "--quiet",
         "--eval", "--log-json", log, "--save-params", params] + list(extra), env=env)
    with open(log) as f:
        losses = [json.loads(line)["loss"] for line in f if line.strip()]
    with np.load(params) as z:
        return losses, dict(z)


def sample_case(name, target, opt, graphs=True):
    """(failures, (kernels emitted, launched)) of one sample trained on the emulated
    device, judged against PyTorch float64."""
    build_args, ref_args, lr = SAMPLE_CONFIGS[opt]
    with tl.TempDir() as d:
        common = ("--steps", str(STEPS), "--lr", str(lr), "--no-dropout", *ref_args)
        ref = tl.reference(name, d, "--dtype", "float64", *common)
        ref32 = tl.reference(name, d, "--dtype", "float32", *common)
        model = tl.without_dropout(name, d)
        art = build(model, os.path.join(d, "m.ortc"), target, ["--dim", "batch=4"] + build_args)
        feed = os.path.join(d, "feed.npz")
        np.savez(feed, **tl.feed_of(ref))
        losses, trained = train(art, feed, lr, d, "run", [] if graphs else ["--no-graphs"], env=flavour_env(target))
        coverage = kernel_coverage(art, os.path.join(d, "run-stats.json"))
        upd, upd64, upd32 = {}, {}, {}
        noise_only = [k[len("grad/"):] for k in ref if k.startswith("grad/")
                      and np.abs(ref[k]).max() < 1e-9 * max(1.0, np.abs(ref["init/" + k[5:]]).max())]
        for key in ref:
            if not key.startswith("final/"):
                continue
            p = key[len("final/"):]
            if p not in trained:
                return ["ortc did not save '%s'" % p], coverage
            if p in noise_only or (opt == "adamw" and noise_only and p.endswith("running_mean")):
                continue
            p0 = ref["init/" + p].astype(np.float64)
            upd[p], upd64[p], upd32[p] = trained[p] - p0, ref[key] - p0, ref32[key] - p0
        failures, worst = tl.check_oracle(losses, ref["losses"], ref32["losses"], upd, upd64, upd32,
                                          "%s/%s on emulated %s" % (name, opt, target))
        print("%s/%s/%s%s: loss err %.1e (torch f32 %.1e), update err %.1e (torch f32 %.1e)" % (
            name, opt, target, "" if graphs else " (no graphs)", worst["loss"], worst["loss32"],
            worst["update"], worst["update32"]))
        return failures, coverage


SAMPLE_CONFIGS = {
    "sgd": (["--optimizer", "sgd", "--momentum", "0.9", "--weight-decay", "0.01"],
            ["--optimizer", "sgd", "--momentum", "0.9", "--weight-decay", "0.01"], 0.05),
    "adamw": (["--optimizer", "adamw", "--weight-decay", "0.01"],
              ["--optimizer", "adamw", "--weight-decay", "0.01"], 0.004),
}


def index_ops_case(target):
    """test_index_ops_vs_torch's classifier (TopK, CumSum, ArgMax, Mod, GatherElements,
    ScatterElements, ReduceProd) trained with SGD on the emulated target, judged against
    PyTorch float64. Returns (failures, coverage)."""
    import torch
    import test_index_ops_vs_torch as ix
    torch.manual_seed(0)
    model = ix.IndexNet()
    rng = np.random.RandomState(0)
    x = rng.randn(ix.BATCH, ix.INPUT).astype(np.float32)
    labels = rng.randint(0, ix.CLASSES, size=ix.BATCH).astype(np.int64)
    coverage = []
    with tempfile.TemporaryDirectory(prefix="ortc-emu-") as work:
        stats = os.path.join(work, "train-stats.json")

        def after(art, d):  # the eval step's kernels too
            train(art, os.path.join(d, "feed.npz"), 0.0, work, "eval", steps=1)
            emitted, launched = kernel_coverage(art, stats)
            coverage.append((emitted, launched | kernel_coverage(art, os.path.join(work, "eval-stats.json"))[1]))

        case = unittest.TestCase()
        try:
            tl.check_sgd_vs_torch(case, model, x, labels, ix.STEPS, ix.LR, "index ops on emulated " + target,
                                  build_flags=["--target", target], env=emu_env({"ORTC_EMU_STATS": stats}),
                                  on_artifact=after)
        except AssertionError as e:
            return [str(e)[-4000:]], coverage[0] if coverage else (set(), set())
    return [], coverage[0]


def transpose_model(path):
    """loss = sum(transpose(transpose(x, 0231) * w, 3102)^2), w trained."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    w = np.random.default_rng(1).standard_normal((3, 5, 41, 37)).astype(np.float32)
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[0, 2, 3, 1]),
             helper.make_node("Mul", ["t", "w"], ["y"]),
             helper.make_node("Transpose", ["y"], ["z"], perm=[3, 1, 0, 2]),
             helper.make_node("Mul", ["z", "z"], ["zz"]),
             helper.make_node("ReduceSum", ["zz"], ["loss"], keepdims=0)]
    graph = helper.make_graph(nodes, "transpose",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 37, 5, 41])],
                              [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])],
                              [numpy_helper.from_array(w, "w")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def conv_pool_model(path):
    """loss = mean(avgpool(maxpool(conv(x * s)))^2) with a grouped, strided, dilated,
    asymmetrically padded conv (its output is 5 x 12), an overlapping max pool whose ceil
    mode adds a window (3 x 7, not 3 x 6), and an average pool counting unequal begin and
    end pads: every gradient that used to be scattered with atomics."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(2)
    s = rng.standard_normal((1, 4, 1, 1)).astype(np.float32)
    w = rng.standard_normal((6, 2, 3, 3)).astype(np.float32)
    nodes = [helper.make_node("Mul", ["x", "s"], ["xs"]),
             helper.make_node("Conv", ["xs", "w"], ["c"], group=2, strides=[2, 1], dilations=[2, 2],
                              pads=[1, 2, 1, 0]),
             helper.make_node("MaxPool", ["c"], ["m"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
                              ceil_mode=1),
             helper.make_node("AveragePool", ["m"], ["a"], kernel_shape=[3, 2], pads=[1, 0, 1, 1],
                              count_include_pad=1),
             helper.make_node("Mul", ["a", "a"], ["aa"]),
             helper.make_node("ReduceMean", ["aa"], ["loss"], keepdims=0)]
    graph = helper.make_graph(nodes, "conv_pool",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4, 11, 14])],
                              [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])],
                              [numpy_helper.from_array(s, "s"), numpy_helper.from_array(w, "w")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def random_ops_case(target):
    """Dropout as exports write it (RandomUniformLike + Less + Where, a Linear head), the
    gpt2 sample with its dropout on, one kernel per op and fused (and a few kernels that
    need shapes of their own: transposes, conv and pooling gradients, a wide rows kernel
    with its GEMM): PyTorch draws other masks, so these are judged against the CPU target, whose counter-based masks the GPU library reproduces
    bit for bit (losses and updates within 1e-5 relative). Returns (failures, coverage)."""
    import test_random_ops as ro
    failures, emitted, launched = [], set(), set()
    with tempfile.TemporaryDirectory(prefix="ortc-emu-") as d:
        drop = os.path.join(d, "dropout.onnx")
        ro.dropout_model(drop, 8, 16, with_head=True)
        rng = np.random.default_rng(0)
        np.savez(os.path.join(d, "drop.npz"), x=rng.standard_normal((8, 16)).astype(np.float32),
                 labels=rng.integers(0, 3, 8).astype(np.int64))
        gpt_feed = os.path.join(d, "gpt.npz")
        np.savez(gpt_feed, input_ids=rng.integers(0, 50, (4, 16)).astype(np.int64),
                 labels=rng.integers(0, 50, (4, 16)).astype(np.int64))
        # Fused, at a batch whose bias gradients sum 256 rows: the GPU kernels split
        # the rows into chunks and add the chunks' partial sums in a second kernel.
        gpt16_feed = os.path.join(d, "gpt16.npz")
        np.savez(gpt16_feed, input_ids=rng.integers(0, 50, (16, 16)).astype(np.int64),
                 labels=rng.integers(0, 50, (16, 16)).astype(np.int64))
        # Transposes whose source's contiguous dim moves (tiled through shared memory on
        # the GPU), at sizes that are not multiples of the 32 x 32 tiles, and their gradients.
        tr = os.path.join(d, "transpose.onnx")
        transpose_model(tr)
        np.savez(os.path.join(d, "tr.npz"), x=rng.standard_normal((3, 37, 5, 41)).astype(np.float32))
        # Conv input and pooling gradients, gathered without atomics: the same bits
        # whatever order the (emulated) threads run in.
        cp = os.path.join(d, "conv_pool.onnx")
        conv_pool_model(cp)
        np.savez(os.path.join(d, "cp.npz"), x=rng.standard_normal((2, 4, 11, 14)).astype(np.float32))
        # A softmax over the 2304 columns of a GEMM's product: its rows kernel computes
        # each element's dot product as it loads it (a row too long for shared memory).
        wide = os.path.join(ROOT, "test", "lit", "Inputs", "wide-softmax.onnxtxt")
        np.savez(os.path.join(d, "wide.npz"), x=rng.standard_normal((2, 2)).astype(np.float32),
                 labels=(rng.random((2, 2304)) / 1152).astype(np.float32))
        for tag, model, feed, flags in (("wide-rows", wide, os.path.join(d, "wide.npz"),
                                         ["--loss", "mse"]),("transpose", tr, os.path.join(d, "tr.npz"),
                                         ["--loss", "none", "--loss-output", "loss"]),
                                        ("conv-pool", cp, os.path.join(d, "cp.npz"),
                                         ["--loss", "none", "--loss-output", "loss"]),
                                        ("drop", drop, os.path.join(d, "drop.npz"), []),
                                        ("gpt", tl.sample_path("gpt2"), gpt_feed,
                                         ["--dim", "batch=4", "--fusion", "none"]),
                                        ("gpt-fused", tl.sample_path("gpt2"), gpt16_feed,
                                         ["--dim", "batch=16"])):
            common = ["--optimizer", "sgd", "--momentum", "0.9"] + flags
            cpu = build(model, os.path.join(d, tag + "-cpu.ortc"), "cpu", common)
            gpu = build(model, os.path.join(d, tag + "-gpu.ortc"), target, common)
            want = train(cpu, feed, 0.05, d, tag + "-cpu", ["--seed", "3"])
            got = train(gpu, feed, 0.05, d, tag + "-gpu", ["--seed", "3"])
            if tag == "conv-pool":
                again = train(gpu, feed, 0.05, d, tag + "-gpu2", ["--seed", "3"],
                              env=emu_env({"ORTC_EMU_SEED": "7"}))
                if again[0] != got[0] or any(not np.array_equal(again[1][k], got[1][k]) for k in got[1]):
                    failures.append("conv-pool: another thread order trained other bits")
            e, l = kernel_coverage(gpu, os.path.join(d, tag + "-gpu-stats.json"))
            emitted |= e
            launched |= l
            for i, (a, b) in enumerate(zip(got[0], want[0])):
                if not abs(a - b) <= 1e-5 * max(abs(b), 1e-3):
                    failures.append("%s step %d: loss %r, CPU target %r" % (tag, i + 1, a, b))
            for k in want[1]:
                p0 = want[1][k].astype(np.float64)
                if not tl.rel_err(got[1][k].astype(np.float64), p0) <= 1e-5:
                    failures.append("%s: '%s' differs from the CPU target's by %.2e" % (
                        tag, k, tl.rel_err(got[1][k].astype(np.float64), p0)))
    return failures, (emitted, launched)


def zoo_case(entry, target, opt="adamw"):
    """{stage, error, worst, time} of one zoo file trained on the emulated device."""
    t0 = time.time()
    ref = np.load(os.path.join(test_zoo.ZOO, entry["file"] + ".npz"))
    res = {"stage": "ok", "error": "", "worst": {}}
    with tempfile.TemporaryDirectory(prefix="ortc-emu-") as d:
        art = os.path.join(d, "m.ortc")
        ortc_target, extra, _ = FLAVOURS[target]
        p = subprocess.run([tl.ORTC, "build", os.path.join(test_zoo.ZOO, entry["file"] + ".onnx"), "-o", art,
                            "--target", ortc_target] + extra + test_zoo.OPTS[opt] + list(entry["flags"]),
                           capture_output=True, text=True, env=flavour_env(target))
        if p.returncode:
            res.update(stage="build", error=(p.stderr + p.stdout)[-4000:])
            return res
        feed = {n["name"]: ref[n["name"]] for n in entry["inputs"]}
        feed["labels"] = ref["labels"]
        np.savez(os.path.join(d, "feed.npz"), **feed)
        try:
            losses, trained = train(art, os.path.join(d, "feed.npz"), entry["lr"][opt], d, "run",
                                    steps=entry["steps"], env=flavour_env(target))
        except AssertionError as e:
            res.update(stage="train", error=str(e)[-4000:])
            return res
        res["coverage"] = kernel_coverage(art, os.path.join(d, "run-stats.json"))
        failures = test_zoo.oracle(entry, opt, ref, losses, trained, res["worst"])
        if failures:
            res.update(stage="oracle", error="\n".join(failures))
    res["time"] = time.time() - t0
    return res


class EmulatedModels(unittest.TestCase):
    """Every sample and zoo model, 5 AdamW steps on both emulated targets (two samples also
    with SGD and graph replay off; two samples and a zoo file also on RDNA, wave32);
    each artifact's kernels must all run."""
    manifest = test_zoo.load_manifest()
    xfail = test_zoo.load_xfail()
    results = {}

    @classmethod
    def setUpClass(cls):
        only = set(filter(None, os.environ.get("EMU_ONLY", "").split(",")))
        cases = [("zoo", e["file"], t) for e in cls.manifest["files"] for t in TARGETS]
        cases += [("sample", s, t) for s in tl.SAMPLES for t in TARGETS]
        cases += [("sample-sgd", s, t) for s in SGD_NO_GRAPHS for t in TARGETS]
        cases += [(k, k, t) for k in ("index-ops", "random-ops") for t in TARGETS]
        cases += [("sample", s, "rdna") for s in RDNA_SAMPLES] + [("zoo", z, "rdna") for z in RDNA_ZOO]
        cases = [c for c in cases if not only or c[1] in only]
        entries = {e["file"]: e for e in cls.manifest["files"]}

        def one(case):
            kind, name, target = case
            t0 = time.time()
            if kind == "zoo":
                r = zoo_case(entries[name], target)
            else:
                try:
                    if kind == "index-ops":
                        with TORCH_LOCK:  # torch.onnx.export is not thread-safe
                            f, coverage = index_ops_case(target)
                    elif kind == "random-ops":
                        f, coverage = random_ops_case(target)
                    else:
                        f, coverage = (sample_case(name, target, "adamw") if kind == "sample"
                                       else sample_case(name, target, "sgd", graphs=False))
                    r = {"stage": "oracle" if f else "ok", "error": "\n".join(f), "worst": {}, "coverage": coverage}
                except AssertionError as e:
                    r = {"stage": "run", "error": str(e)[-4000:], "worst": {}}
            r["time"] = time.time() - t0
            return case, r

        with ThreadPoolExecutor(max(1, int(os.environ.get("EMU_JOBS", "2")))) as pool:
            for case, r in pool.map(one, cases):
                cls.results[case] = r

    def check(self, kind, name, target):
        case = (kind, name, target)
        if case not in self.results:
            raise unittest.SkipTest("not selected by EMU_ONLY")
        r = self.results[case]
        print("%-28s %-5s %-7s %5.1fs %s" % (name if kind in ("zoo", "sample", name) else name + " " + kind, target, r["stage"], r["time"], r["error"].splitlines()[0]
                                             if r["error"] else ""))
        if kind == "zoo":
            xf = self.xfail.get(name + "/adamw", self.xfail.get(name))
            if xf is not None and xf.startswith("unstable:") and r["stage"] == "oracle":
                raise unittest.SkipTest("xfail (%s): %s" % (xf, r["error"]))
        self.assertEqual(r["stage"], "ok", "%s on emulated %s failed at %s:\n%s" % (name, target, r["stage"], r["error"]))
        emitted, launched = r["coverage"]
        self.assertFalse(emitted - launched, "%s on emulated %s: kernels the artifact defines but never launched"
                         % (name, target))

    def test_every_library_kernel_ran(self):
        """Every __global__ of the GPU kernel library ran in some model on each target."""
        with open(os.path.join(ROOT, "kernels", "gpu", "ortc_gpu_kernels.h")) as f:
            library = set(KERNEL_DEF.findall(f.read()))
        for target in TARGETS:
            ran = set()
            for (kind, name, t), r in self.results.items():
                if t == target and "coverage" in r:
                    ran |= r["coverage"][1]
            if os.environ.get("EMU_ONLY"):
                raise unittest.SkipTest("a subset of the models ran (EMU_ONLY)")
            self.assertFalse(library - ran - ELSEWHERE,
                             "library kernels no model launched on emulated %s" % target)


for _e in EmulatedModels.manifest["files"]:
    for _t in TARGETS:
        setattr(EmulatedModels, "test_zoo_%s_%s" % (_e["file"].replace(".", "_"), _t),
                lambda self, n=_e["file"], t=_t: self.check("zoo", n, t))
for _s in tl.SAMPLES:
    for _t in TARGETS + (("rdna",) if _s in RDNA_SAMPLES else ()):
        setattr(EmulatedModels, "test_sample_%s_%s" % (_s, _t),
                lambda self, n=_s, t=_t: self.check("sample", n, t))
for _z in RDNA_ZOO:
    setattr(EmulatedModels, "test_zoo_%s_rdna" % _z.replace(".", "_"), lambda self, n=_z: self.check("zoo", n, "rdna"))
for _k in ("index-ops", "random-ops"):
    for _t in TARGETS:
        setattr(EmulatedModels, "test_%s_%s" % (_k.replace("-", "_"), _t),
                lambda self, k=_k, t=_t: self.check(k, k, t))
for _s in SGD_NO_GRAPHS:
    for _t in TARGETS:
        setattr(EmulatedModels, "test_sample_%s_sgd_no_graphs_%s" % (_s, _t),
                lambda self, n=_s, t=_t: self.check("sample-sgd", n, t))


class EmulatedTrainingRun(unittest.TestCase):
    """`ortc train`'s run-time settings on a GPU: a warm-up + cosine schedule, AdamW's betas
    given at train time and gradient accumulation (accumulate_step) train alike with graph
    replay on and off (the lr and betas are device scalars a replayed graph reads), and as
    the CPU target trains them."""
    def test_schedule_betas_and_accumulation_under_graph_replay(self):
        flags = ["--lr-schedule", "cosine", "--warmup-steps", "1", "--min-lr", "0.001",
                 "--beta1", "0.8", "--eps", "1e-6", "--grad-accum", "2"]
        with tl.TempDir() as d:
            rs = np.random.RandomState(3)
            feed = os.path.join(d, "feed.npz")
            np.savez(feed, x=rs.randn(6, 4, 32).astype(np.float32), labels=rs.randint(0, 10, (6, 4)))
            common = ["--dim", "batch=4", "--optimizer", "adamw", "--grad-accum"]
            gpu = build(tl.sample_path("mlp"), os.path.join(d, "gpu.ortc"), "cuda", common)
            cpu = os.path.join(d, "cpu.ortc")
            run([tl.ORTC, "build", tl.sample_path("mlp"), "-o", cpu] + common)
            runs = {tag: train(art, feed, 0.01, d, tag, flags + extra, steps=4)
                    for tag, art, extra in (("graphs", gpu, []), ("launches", gpu, ["--no-graphs"]),
                                            ("cpu", cpu, []))}
        self.assertEqual(runs["graphs"][0], runs["launches"][0])
        for k, v in runs["graphs"][1].items():
            np.testing.assert_array_equal(v, runs["launches"][1][k], err_msg=k)
            np.testing.assert_allclose(v, runs["cpu"][1][k], rtol=1e-4, atol=1e-6, err_msg=k)
        np.testing.assert_allclose(runs["graphs"][0], runs["cpu"][0], rtol=1e-5)


    def test_recompute_trains_as_without(self):
        """`--recompute selective` and `layers` on the CUDA target train the GPT sample (dropout
        in training mode) as without, within 1e-6 relative: the clones, a GELU's clone in the
        kernel of its gradient, masks drawn again from the counter-based generator."""
        runs = {}
        with tl.TempDir() as d:
            feed = os.path.join(d, "feed.npz")
            for policy in ("none", "selective", "layers"):
                art = build(tl.sample_path("gpt2"), os.path.join(d, policy + ".ortc"), "cuda",
                            ["--dim", "batch=4", "--optimizer", "adamw", "--recompute", policy])
                if policy == "none":
                    tl.random_feed(art, feed, 3)
                runs[policy] = train(art, feed, 0.01, d, policy, steps=3)
        for policy in ("selective", "layers"):
            np.testing.assert_allclose(runs[policy][0], runs["none"][0], rtol=1e-6, err_msg=policy)
            for k, v in runs["none"][1].items():
                np.testing.assert_allclose(runs[policy][1][k], v, rtol=1e-6, atol=1e-7,
                                           err_msg="%s: %s" % (policy, k))

    def test_sixteen_bit_casts_train_as_pytorch_rounds(self):
        """float16 and bfloat16 round trips (test_sixteen_bit_casts's net): the vendors'
        conversions on the emulated device against PyTorch's float64 run."""
        import torch
        import test_sixteen_bit_casts as sb
        rng = np.random.RandomState(0)
        x = (rng.randn(sb.BATCH, sb.INPUT) * 3).astype(np.float32)
        labels = rng.randint(0, sb.CLASSES, size=sb.BATCH).astype(np.int64)
        for target in TARGETS:
            torch.manual_seed(0)
            tl.check_sgd_vs_torch(self, sb.CastNet(), x, labels, sb.STEPS, sb.LR,
                                  "16-bit casts on emulated " + target, expect_ops=("Cast",),
                                  build_flags=["--target", target], env=flavour_env(target))

    def test_sixteen_bit_training_matches_the_cpu_target(self):
        """ortc build --precision bf16 and fp16 (loss scaling on the device) on the emulated
        GPUs: the same roundings as the CPU target's build, so the same trajectory (float32
        reductions in another order may move a 16-bit rounding: a loose tolerance), and the
        fp16 step logs the loss scale it used."""
        with tl.TempDir() as d:
            feed = os.path.join(d, "feed.npz")
            for precision in ("bf16", "fp16"):
                flags = ["--dim", "batch=4", "--optimizer", "adamw", "--precision", precision]
                cpu = build(tl.sample_path("gpt2"), os.path.join(d, precision + "-cpu.ortc"), "cpu", flags)
                if not os.path.exists(feed):
                    tl.random_feed(cpu, feed, 3)
                want = train(cpu, feed, 0.01, d, precision + "-cpu", steps=3)
                for target in TARGETS:
                    art = build(tl.sample_path("gpt2"), os.path.join(d, precision + target + ".ortc"),
                                target, flags)
                    got = train(art, feed, 0.01, d, precision + target, env=flavour_env(target), steps=3)
                    np.testing.assert_allclose(got[0], want[0], rtol=2e-3, err_msg=precision + " " + target)
                    for k, v in want[1].items():
                        np.testing.assert_allclose(got[1][k], v, rtol=0.05, atol=2e-3,
                                                   err_msg="%s %s: %s" % (precision, target, k))
                    with open(os.path.join(d, precision + target + ".jsonl")) as f:
                        first = json.loads(f.readline())
                    if precision == "fp16":
                        self.assertEqual(first["loss_scale"], 65536.0)
                    else:
                        self.assertNotIn("loss_scale", first)

    def test_sixteen_bit_accumulation_matches_the_cpu_target(self):
        """--accum-dtype chunked16 and plain16: the GPU library's tiled GEMM (the CNN's
        convolutions too) and sums add in bf16 as the CPU library does, chunk for chunk;
        both differ from the float-accumulating bf16 build (the 16-bit sums ran). The CNN
        trains with SGD: the GPU's input gradient of a convolution gathers its sums in
        another grouping than the CPU's col2im, and AdamW's sign-like first steps would turn
        a 16-bit rounding apart into a whole step apart."""
        with tl.TempDir() as d:
            for model, optimizer in (("gpt2", "adamw"), ("cnn", "sgd")):
                feed = os.path.join(d, model + "-feed.npz")
                base = ["--dim", "batch=4", "--optimizer", optimizer, "--precision", "bf16"]
                ref = build(tl.sample_path(model), os.path.join(d, model + "-fp32acc.ortc"), "cpu", base)
                tl.random_feed(ref, feed, 3)
                float_acc = train(ref, feed, 0.01, d, model + "-fp32acc", steps=3)
                for accum in ("chunked16", "plain16"):
                    flags = base + ["--accum-dtype", accum] + (["--accum-chunk", "16"] if accum == "chunked16" else [])
                    tag = model + "-" + accum
                    cpu = build(tl.sample_path(model), os.path.join(d, tag + "-cpu.ortc"), "cpu", flags)
                    want = train(cpu, feed, 0.01, d, tag + "-cpu", steps=3)
                    self.assertFalse(np.array_equal(want[0], float_acc[0]), tag + ": no 16-bit sums ran")
                    # The CNN's convolutions on one target: the other runs the same templates.
                    for target in TARGETS if model == "gpt2" else TARGETS[:1]:
                        art = build(tl.sample_path(model), os.path.join(d, tag + target + ".ortc"), target, flags)
                        got = train(art, feed, 0.01, d, tag + target, env=flavour_env(target), steps=3)
                        np.testing.assert_allclose(got[0], want[0], rtol=2e-3, err_msg=tag + " " + target)
                        for k, v in want[1].items():
                            np.testing.assert_allclose(got[1][k], v, rtol=0.05, atol=2e-3,
                                                       err_msg="%s %s: %s" % (tag, target, k))

    def test_out_of_range_labels_are_named_on_the_gpu_target(self):
        """The GPU loss kernel checks the labels on the device, as the CPU's does: the finite
        flag refuses the step (its many NaNs are flagged race-free), then the run stops naming
        the input, element, value and range."""
        with tl.TempDir() as d:
            art = build(tl.sample_path("mlp"), os.path.join(d, "gpu.ortc"), "cuda", ["--dim", "batch=4"])
            feed = os.path.join(d, "feed.npz")
            np.savez(feed, x=np.zeros((4, 32), np.float32), labels=np.array([1, 2, 99, 4], np.int64))
            p = run([tl.ORTC_RUN, "train", art, "--data", feed, "--steps", "1", "--quiet",
                     "--save-params", os.path.join(d, "p.npz")], expect=1)
            self.assertIn("train_step: input 'labels'[2] = 99 is out of range: node 'loss' takes class "
                          "labels in [0, 10) or -100 (ignored)", p.stderr)
            self.assertNotIn("not finite", p.stderr)


@unittest.skipUnless(shutil.which("mpirun") and os.path.exists(os.path.join(EMU, "lib", "libnccl.so.2")),
                     "needs Open MPI (mpirun) and the NCCL stand-in built with it")
class EmulatedDataParallel(unittest.TestCase):
    """The GPU targets' data-parallel path: the runtime's NCCL (cuda) and RCCL (rocm)
    communicators, loading the stand-in libnccl.so.2 / librccl.so.1 (NCCL's C API over
    loopback TCP, collectives on the emulated stream) from the loader's path as they would
    the real ones, bootstrapped by mpirun's MPI or by torchrun-style variables. Two ranks on
    halves of each batch, judged like the CPU target's data-parallel runs: against PyTorch's
    float64 run of the whole batch."""
    def check(self, target, flags, ref_flags, lr, launch="mpirun"):
        from test_data_parallel import split_steps
        with tl.TempDir() as d:
            ref = tl.reference("mlp", d, "--dtype", "float64", "--steps", "3", "--lr", str(lr),
                               "--batches-per-step", "--batch", "4", *ref_flags)
            ref32 = tl.reference("mlp", d, "--dtype", "float32", "--steps", "3", "--lr", str(lr),
                                 "--batches-per-step", "--batch", "4", *ref_flags)
            art = build(tl.sample_path("mlp"), os.path.join(d, "dp.ortc"), target,
                        ["--dim", "batch=2", "--data-parallel"] + flags)
            with open(os.path.join(art, "manifest.json")) as f:
                self.assertEqual(json.load(f)["data_parallel"]["communicator"],
                                 "nccl" if target == "cuda" else "rccl")
            feed, log, params = (os.path.join(d, f) for f in ("halves.npz", "log.jsonl", "p.npz"))
            np.savez(feed, **split_steps(ref, 2))
            env = dict(tl.MPI_ENV, **flavour_env(target))
            env["LD_LIBRARY_PATH"] = os.path.join(EMU, "lib")
            args = [tl.ORTC_RUN, "train", art, "--data", feed, "--steps", "3", "--lr", str(lr),
                    "--log-json", log, "--save-params", params]
            if launch == "mpirun":
                tl.mpirun(2, args, env=env)
            else:
                tl.torchrun(2, args, env=env)
            upd, upd64, upd32 = tl.updates_vs_reference(ref, ref32, dict(np.load(params)),
                                                        "adamw" in ref_flags)
            failures, worst = tl.check_oracle(tl.log_losses(log), ref["losses"], ref32["losses"], upd,
                                              upd64, upd32, "%s, 2 ranks" % target)
            self.assertFalse(failures, "\n".join(failures))

    def test_cuda_two_ranks_through_nccl(self):
        self.check("cuda", [], [], 0.05)

    def test_cuda_two_ranks_started_like_torchrun(self):
        """No mpirun: RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT, NCCL's id through the
        runtime's TCP rendezvous."""
        self.check("cuda", [], [], 0.05, launch="torchrun")

    def test_torchrun_style_errors(self):
        """A rank whose peers never come stops with the rendezvous's address; one whose
        peer dies mid-run stops too instead of waiting in a collective."""
        with tl.TempDir() as d:
            art = build(tl.sample_path("mlp"), os.path.join(d, "dp.ortc"), "cuda",
                        ["--dim", "batch=2", "--data-parallel"])
            feed = os.path.join(d, "feed.npz")
            rng = np.random.default_rng(0)
            np.savez(feed, x=rng.standard_normal((2, 16)).astype(np.float32),
                     y=rng.integers(0, 4, (2,)).astype(np.int64))
            env = dict(flavour_env("cuda"), LD_LIBRARY_PATH=os.path.join(EMU, "lib"), RANK="0",
                       WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(tl.free_port()),
                       ORTC_RENDEZVOUS_TIMEOUT="2")
            p = subprocess.run([tl.ORTC_RUN, "train", art, "--data", feed, "--steps", "1"],
                               capture_output=True, text=True, env=env, timeout=120)
            self.assertEqual(p.returncode, 1, p.stderr)
            self.assertIn("rendezvous at 127.0.0.1:%s" % env["MASTER_PORT"], p.stderr)
            self.assertIn("1 of the other ranks did not connect within 2 s", p.stderr)
            # Rank 1 takes the id and vanishes (no goodbye): rank 0 stops instead of waiting
            # for it in NCCL's start.
            env["MASTER_PORT"] = str(tl.free_port())
            rank0 = subprocess.Popen([tl.ORTC_RUN, "train", art, "--data", feed, "--steps", "1"],
                                     stderr=subprocess.PIPE, text=True, env=env)
            deadline = time.time() + 60
            while True:
                try:
                    s = socket.create_connection(("127.0.0.1", int(env["MASTER_PORT"])))
                    break
                except OSError:
                    self.assertLess(time.time(), deadline, "rank 0 never listened")
                    time.sleep(0.1)
            s.sendall(b"ortc" + struct.pack("ii", 1, 2))
            got = b""
            while len(got) < 128:
                chunk = s.recv(128 - len(got))
                self.assertTrue(chunk, "rank 0 sent no id")
                got += chunk
            s.close()
            _, err = rank0.communicate(timeout=60)
            self.assertEqual(rank0.returncode, 1, err)
            self.assertIn("a peer of the data-parallel run (through 127.0.0.1:%s) ended without "
                          "finishing" % env["MASTER_PORT"], err)
            env["MASTER_PORT"] = "0"
            p = subprocess.run([tl.ORTC_RUN, "train", art, "--data", feed, "--steps", "1"],
                               capture_output=True, text=True, env=env, timeout=120)
            self.assertEqual(p.returncode, 1, p.stderr)
            self.assertIn("torchrun-style variables are set but incomplete", p.stderr)

    def test_rocm_zero1_through_rccl(self):
        self.check("rocm", ["--zero", "1", "--ranks", "2", "--optimizer", "adamw", "--weight-decay",
                            "0"], ["--optimizer", "adamw"], 0.01)


class EmulatorChecks(unittest.TestCase):
    """Planted defects (defects.cu): each must fail on the emulated device with the
    report that names it, and its correct twin must pass."""
    programs = {}

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="ortc-emu-defects-")
        with open(os.path.join(HERE, "defects.cu")) as f:
            body = f.read()
        for front, driver in (("cuda", "emu-cuda"), ("rocm", "emu-hip")):
            prelude = run([os.path.join(tl.BUILD, "test", "gpu", "ortc-gpu-prelude"), front]).stdout
            src, out = os.path.join(cls.tmp, "defects-%s.cu" % front), os.path.join(cls.tmp, "defects-" + front)
            with open(src, "w") as f:
                f.write(prelude + body)
            run([os.path.join(EMU, driver), src, "-o", out, "-I", os.path.join(ROOT, "runtime", "include")])
            cls.programs[front] = out

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def expect(self, case, want, fronts=TARGETS):
        for front in fronts:
            bad = subprocess.run([self.programs[front], case], capture_output=True, text=True)
            self.assertEqual(bad.returncode, 1, "%s on %s: %s" % (case, front, bad.stderr))
            self.assertIn(want, bad.stderr, "%s on %s" % (case, front))
            ok = subprocess.run([self.programs[front], case + "-ok" if case != "warp32" else "warp-native"],
                                capture_output=True, text=True)
            self.assertEqual(ok.returncode, 0, "%s twin on %s: %s" % (case, front, ok.stderr))

    def test_removed_barrier_is_a_shared_race(self):
        self.expect("barrier", "race on shared memory")
        self.expect("barrier", "blockSum(float const*, float*, int, bool)::buf")

    def test_off_by_one_is_out_of_bounds(self):
        self.expect("off-by-one", "reads 4 bytes at")
        self.expect("off-by-one", "0 bytes past the end of allocation #1 (1024 bytes)")

    def test_overrun_into_another_operand_of_the_arena(self):
        """Inside the arena an off-by-one lands on another tensor's bytes: the operands the
        runtime names for the launch (ortc_launch_operands) bound it, not the allocation."""
        self.expect("operand-overrun", "reads 4 bytes at")
        self.expect("operand-overrun", "offset 1024 of allocation #3, outside every operand of launch "
                    "'ortc_scale_test' (ONNX node '/layer/Mul') there: [0, 1024), [2048, 3072)")

    def test_plain_stores_to_one_word_are_a_global_race(self):
        self.expect("global-race", "race on global memory")

    def test_32_lane_reduction_fails_at_warp_64(self):
        self.expect("warp32", "sum ", fronts=("rocm",))
        ok = subprocess.run([self.programs["cuda"], "warp32"], capture_output=True, text=True)
        self.assertEqual(ok.returncode, 0, ok.stderr)  # right at warp 32

    def test_grid_over_the_arch_limit(self):
        self.expect("grid-y", "grid.y = 70000; sm_90 allows 65535", fronts=("cuda",))

    def test_shared_memory_over_the_arch_limit(self):
        self.expect("shared-limit", "uses 80000 bytes of static shared memory; sm_90 allows 49152", fronts=("cuda",))
        self.expect("shared-limit", "uses 80000 bytes of static shared memory; gfx90a allows 65536", fronts=("rocm",))

    def test_missing_stream_synchronisation(self):
        self.expect("missing-sync", "before the copy was done")

    def test_launch_error_names_the_kernel_through_the_runtime(self):
        # The emulator's reports reach the user through ortc-run like a GPU's errors.
        self.expect("off-by-one", "kernel scale (")

    def test_wave32_code_on_a_wave64_device(self):
        """An artifact for gfx90a and gfx1100 whose kernels were compiled for gfx1100 (wave32)
        passes the runtime's arch check on a gfx90a, but the device refuses the launches, as a
        CDNA GPU cannot run wave32 code; on the gfx1100 it was built for, it trains."""
        with tempfile.TemporaryDirectory(prefix="ortc-emu-wave-") as d:
            env = emu_env({"ORTC_EMU_ARCH": "gfx1100"})
            art = build(tl.sample_path("mlp"), os.path.join(d, "m.ortc"), "rocm",
                        ["--dim", "batch=4", "--arch", "gfx90a,gfx1100"], env=env)
            feed = os.path.join(d, "feed.npz")
            np.savez(feed, x=np.random.RandomState(0).rand(4, 32).astype(np.float32), labels=np.zeros(4, np.int64))
            cmd = [tl.ORTC_RUN, "train", art, "--data", feed, "--steps", "1", "--quiet"]
            run(cmd, env=env)
            p = run(cmd, env=emu_env({"ORTC_EMU_ARCH": "gfx90a"}), expect=1)
            self.assertIn("it was compiled for 32-lane warps; gfx90a runs 64-lane ones", p.stderr)

    def test_runtime_names_each_launchs_operands(self):
        """The real runtime passes each launch's operands (the manifest's "bytes" of an arena
        argument) to the device: with one operand's size understated by half, the fused kernel's
        writes past it (a gemm kernel's epilogue) are reported, naming the launch and its ONNX
        node; as built, it trains."""
        with tempfile.TemporaryDirectory(prefix="ortc-emu-operands-") as d:
            art = build(tl.sample_path("mlp"), os.path.join(d, "m.ortc"), "cuda", ["--dim", "batch=4"])
            feed = os.path.join(d, "feed.npz")
            np.savez(feed, x=np.random.RandomState(0).rand(4, 32).astype(np.float32), labels=np.zeros(4, np.int64))
            cmd = [tl.ORTC_RUN, "train", art, "--data", feed, "--steps", "1", "--quiet"]
            run(cmd)
            path = os.path.join(art, "manifest.json")
            with open(path) as f:
                m = json.load(f)
            launch = next(l for l in m["functions"]["train_step"]["launches"]
                          if l["op"] == "fused_gemm" and any(a.get("bytes", 0) > 4 for a in l["args"]))
            arg = [a for a in launch["args"] if a.get("bytes", 0) > 4][-1]
            arg["bytes"] //= 2
            with open(path, "w") as f:
                json.dump(m, f)
            p = run(cmd, expect=1)
            self.assertIn("outside every operand of launch '%s' (ONNX node '%s')" % (launch["kernel"], launch["node"]),
                          p.stderr)
            self.assertIn("[%d, %d)" % (arg["arena"], arg["arena"] + arg["bytes"]), p.stderr)


if __name__ == "__main__":
    unittest.main()
