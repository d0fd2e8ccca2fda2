# The CPU target's thread pool and instruction-set levels, seen from outside the process:
# - one pool: during a step the runtime process has exactly the threads it was given (the
#   kernels' OpenMP pool, which oneDNN shares), and no BLAS library with a pool of its own
#   is loaded;
# - `--threads`, ORTC_THREADS and the default (one thread per physical core) size it;
# - `ortc build --cpu LEVEL` is recorded in the manifest and the runtime refuses a CPU
#   that lacks the level, naming both.
import json
import os
import subprocess
import time
import unittest

import numpy as np

from ortc_testlib import ENV, ORTC, ORTC_RUN, TempDir, log_losses, run, sample_path

LEVELS = ["x86-64-v2", "x86-64-v3", "x86-64-v4"]
LEVEL_FLAGS = {  # each level adds these /proc/cpuinfo flags to the one below
    "x86-64-v2": ["cx16", "lahf_lm", "popcnt", "sse4_1", "sse4_2", "ssse3"],
    "x86-64-v3": ["avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe", "xsave"],
    "x86-64-v4": ["avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"],
}


def cpu_flags():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    return set()


def physical_cores():
    cores = set()
    for cpu in os.sched_getaffinity(0):
        topo = "/sys/devices/system/cpu/cpu%d/topology/" % cpu
        try:
            with open(topo + "physical_package_id") as a, open(topo + "core_id") as b:
                cores.add((a.read().strip(), b.read().strip()))
        except OSError:
            return len(os.sched_getaffinity(0))
    return max(1, len(cores))


def feed(d, batch):
    r = np.random.RandomState(0)
    path = os.path.join(d, "feed.npz")
    np.savez(path, x=r.randn(batch, 3, 16, 16).astype(np.float32),
             labels=r.randint(0, 10, size=(batch,)).astype(np.int64))
    return path


def env_without_threads(**extra):
    env = {k: v for k, v in ENV.items() if k not in ("ORTC_THREADS", "OMP_NUM_THREADS")}
    env.update(extra)
    return env


def compute_threads(pid):
    """The process's threads but the feed reader ("ortc-feed", which only reads files)."""
    n = 0
    for t in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/comm" % (pid, t)) as f:
                n += f.read().strip() != "ortc-feed"
        except OSError:
            pass
    return n


def watch_threads(cmd, env):
    """Runs cmd, sampling its thread count (the feed reader left out) until it exits: (max
    threads, mapped libraries seen mid-run, returncode, stderr)."""
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    most, libs, polls = 0, set(), 0
    while p.poll() is None:
        try:
            most = max(most, compute_threads(p.pid))
            if polls % 20 == 0:
                with open("/proc/%d/maps" % p.pid) as f:
                    libs |= {os.path.basename(line.split()[-1]) for line in f if ".so" in line}
        except OSError:
            pass
        polls += 1
        time.sleep(0.001)
    err = p.stderr.read()
    p.stderr.close()
    return most, libs, p.returncode, err


class ThreadPool(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = TempDir()
        cls.d = cls.tmp.__enter__()
        # The CNN sample at batch 64: steps of several ms, big enough to go parallel.
        cls.art = os.path.join(cls.d, "cnn.ortc")
        run([ORTC, "build", sample_path("cnn"), "-o", cls.art, "--dim", "batch=64"])
        cls.feed = feed(cls.d, 64)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.__exit__(None, None, None)

    def train(self, env, *args):
        return watch_threads([ORTC_RUN, "train", self.art, "--data", self.feed,
                              "--steps", "150"] + list(args), env)

    def test_threads_flag_sizes_the_only_pool(self):
        for n in (1, 2):
            most, libs, rc, err = self.train(env_without_threads(), "--threads", str(n))
            self.assertEqual(rc, 0, err)
            self.assertEqual(most, n, "--threads %d: the process had %d threads" % (n, most))
            self.assertFalse([l for l in libs if "blas" in l], "a BLAS library is loaded: %s" % libs)
            self.assertTrue([l for l in libs if l.startswith("libdnnl")], "oneDNN is not loaded")

    def test_ortc_threads_environment(self):
        most, _, rc, err = self.train(env_without_threads(ORTC_THREADS="1"))
        self.assertEqual(rc, 0, err)
        self.assertEqual(most, 1)

    def test_default_is_one_thread_per_physical_core(self):
        most, _, rc, err = self.train(env_without_threads())
        self.assertEqual(rc, 0, err)
        self.assertEqual(most, physical_cores())

    def test_bad_ortc_threads_is_an_error(self):
        p = subprocess.run([ORTC_RUN, "train", self.art, "--data", self.feed, "--steps", "1"],
                           env=env_without_threads(ORTC_THREADS="many"), capture_output=True,
                           text=True)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("ORTC_THREADS", p.stderr)
        self.assertIn("'many'", p.stderr)


class Fusion(unittest.TestCase):
    def test_fused_and_unfused_artifacts_train_alike(self):
        """The GPT sample (dropout on, SGD with momentum) built with kernel formation and
        with --fusion none: 3 steps give the same losses and parameters at 1 and 2
        threads, up to the rounding of sums taken in another order (the fused kernels
        compute the same float32 values; GEMMs are the same calls). SGD, because AdamW
        divides a gradient by its own magnitude: the key bias's gradient is zero in exact
        arithmetic (softmax ignores a per-row constant), pure rounding noise that AdamW
        turns into steps of lr either way."""
        with TempDir() as d:
            rng = np.random.RandomState(0)
            data = os.path.join(d, "feed.npz")
            np.savez(data, input_ids=rng.randint(0, 64, (8, 16)).astype(np.int64),
                     labels=rng.randint(0, 64, (8, 16)).astype(np.int64))
            got = {}
            for mode in ("none", "default"):
                art = os.path.join(d, mode + ".ortc")
                run([ORTC, "build", sample_path("gpt2"), "-o", art, "--dim", "batch=8",
                     "--optimizer", "sgd", "--momentum", "0.9", "--fusion", mode])
                for threads in ("1", "2"):
                    out = os.path.join(d, "%s%s.npz" % (mode, threads))
                    log = os.path.join(d, "%s%s.jsonl" % (mode, threads))
                    run([ORTC_RUN, "train", art, "--data", data, "--steps", "3", "--seed", "7", "--lr", "0.1",
                         "--threads", threads, "--save-params", out, "--log-json", log, "--quiet"])
                    losses = log_losses(log)
                    got[mode, threads] = losses, dict(np.load(out))
            for threads in ("1", "2"):
                (l0, p0), (l1, p1) = got["none", threads], got["default", threads]
                np.testing.assert_allclose(l1, l0, rtol=1e-6, err_msg="losses, %s threads" % threads)
                self.assertEqual(sorted(p1), sorted(p0))
                for name, value in p0.items():
                    np.testing.assert_allclose(p1[name], value, rtol=1e-5, atol=1e-7,
                                               err_msg="%s, %s threads" % (name, threads))


class NoParams(unittest.TestCase):
    def test_artifact_without_weights(self):
        """`ortc build --no-params` writes no params.bin and marks each omitted value in the
        manifest; ortc-run refuses it without a source of weights, trains it from
        --load-params exactly as the full artifact trains from its own params.bin, and from
        --init-seed reproducibly (the same seed, the same run; another seed, another)."""
        with TempDir() as d:
            rng = np.random.RandomState(0)
            data = os.path.join(d, "feed.npz")
            np.savez(data, x=rng.randn(4, 32).astype(np.float32), labels=rng.randint(0, 10, 4).astype(np.int64))
            full, bare = os.path.join(d, "full.ortc"), os.path.join(d, "bare.ortc")
            flags = ["--dim", "batch=4", "--optimizer", "adamw"]
            run([ORTC, "build", sample_path("mlp"), "-o", full] + flags)
            run([ORTC, "build", sample_path("mlp"), "-o", bare, "--no-params"] + flags)
            self.assertFalse(os.path.exists(os.path.join(bare, "params.bin")))
            with open(os.path.join(bare, "manifest.json")) as f:
                m = json.load(f)
            omitted = [t["name"] for t in m["tensors"] if "init_omitted" in t]
            self.assertIn("net.0.weight", omitted)
            self.assertFalse([t for t in m["tensors"] if "init" in t])
            self.assertNotIn("params.bin", m["files"])

            p = subprocess.run([ORTC_RUN, "train", bare, "--data", data, "--steps", "1"], capture_output=True,
                               text=True, env=ENV)
            self.assertEqual(p.returncode, 1, p.stderr)
            self.assertIn("was built with --no-params: its weights are not in it; give --load-params, "
                          "--load-checkpoint or --init-seed", p.stderr)

            def train(art, *extra):
                log = os.path.join(d, "log.jsonl")
                run([ORTC_RUN, "train", art, "--data", data, "--steps", "3", "--quiet", "--log-json", log]
                    + list(extra))
                return log_losses(log)

            init = os.path.join(d, "init.npz")
            run([ORTC_RUN, "train", full, "--data", data, "--steps", "0", "--save-params", init])
            self.assertEqual(train(bare, "--load-params", init), train(full))
            a, b, c = train(bare, "--init-seed", "5"), train(bare, "--init-seed", "5"), train(bare, "--init-seed", "6")
            self.assertEqual(a, b)
            self.assertNotEqual(a, c)
            self.assertLess(a[-1], a[0])  # it trains


class IndexRanges(unittest.TestCase):
    def test_out_of_range_labels_and_token_ids_are_named(self):
        """A class label outside [0, C) (99, -5) or a token id outside the embedding's rows
        makes the kernels refuse the step on the device, and the run stops naming the input,
        the element, its value and the valid range (as PyTorch's "Target 99 is out of
        bounds"); the ignore_index -100 trains."""
        with TempDir() as d:
            mlp, gpt = os.path.join(d, "mlp.ortc"), os.path.join(d, "gpt.ortc")
            run([ORTC, "build", sample_path("mlp"), "-o", mlp, "--dim", "batch=4"])
            run([ORTC, "build", sample_path("gpt2"), "-o", gpt, "--dim", "batch=2"])
            rng = np.random.RandomState(0)
            x = rng.randn(4, 32).astype(np.float32)

            def train(art, feed, **arrays):
                path = os.path.join(d, "feed.npz")
                np.savez(path, **arrays)
                return subprocess.run([ORTC_RUN, "train", art, "--data", path, "--steps", "2", "--quiet"],
                                      capture_output=True, text=True, env=ENV)

            for bad, at in ((99, 2), (-5, 0)):
                labels = np.array([1, 2, 3, 4], np.int64)
                labels[at] = bad
                p = train(mlp, "feed", x=x, labels=labels)
                self.assertEqual(p.returncode, 1, p.stderr)
                self.assertIn("train_step: input 'labels'[%d] = %d is out of range: node 'loss' takes class "
                              "labels in [0, 10) or -100 (ignored)" % (at, bad), p.stderr)
                self.assertNotIn("not finite", p.stderr)
            p = train(mlp, "feed", x=x, labels=np.array([1, -100, 3, 4], np.int64))
            self.assertEqual(p.returncode, 0, p.stderr)
            ids = rng.randint(0, 64, (2, 16)).astype(np.int64)
            ids[1, 7] = 64
            p = train(gpt, "feed", input_ids=ids, labels=rng.randint(0, 64, (2, 16)).astype(np.int64))
            self.assertEqual(p.returncode, 1, p.stderr)
            self.assertIn("input 'input_ids'[1, 7] = 64 is out of range: node '/wte/Gather' takes indices in "
                          "[-64, 64)", p.stderr)


class NonFinite(unittest.TestCase):
    def test_names_the_gradient_that_is_not_finite(self):
        """Finite inputs and loss, one gradient NaN (sqrt(y * y) at y = 0: inf * 0): the run
        stops naming that parameter's gradient, the device's per-gradient flags say which."""
        import onnx
        from onnx import TensorProto, helper, numpy_helper
        with TempDir() as d:
            w = np.random.RandomState(0).randn(6, 3).astype(np.float32)
            w[:, 1] = 0  # y[:, 1] = 0 for every row: d sqrt(y * y) / dy is inf * 0 there
            b = np.ones(3, np.float32)
            g = helper.make_graph(
                [helper.make_node("MatMul", ["x", "w"], ["y"]), helper.make_node("Mul", ["y", "y"], ["z"]),
                 helper.make_node("Sqrt", ["z"], ["r"]), helper.make_node("Add", ["r", "b"], ["logits"])],
                "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 6])],
                [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [4, 3])],
                [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
            onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]),
                      os.path.join(d, "m.onnx"))
            art, feed = os.path.join(d, "m.ortc"), os.path.join(d, "feed.npz")
            run([ORTC, "build", os.path.join(d, "m.onnx"), "-o", art])
            np.savez(feed, x=np.random.RandomState(1).randn(4, 6).astype(np.float32),
                     labels=np.array([0, 1, 2, 0]))
            p = subprocess.run([ORTC_RUN, "train", art, "--data", feed, "--steps", "1"],
                               capture_output=True, text=True, env=ENV)
            self.assertEqual(p.returncode, 1, p.stderr)
            self.assertIn("step 1: not finite: the gradient of 'w' (the loss is", p.stderr)
            self.assertIn("every input of the step is finite); parameters left unchanged", p.stderr)

    def test_skip_and_stop(self):
        """A batch holding a NaN: `--on-nonfinite skip` logs that step as not finite and goes
        on, and the run ends bit-identical to one that never saw the batch (parameters, AdamW
        moments and step count untouched by it); the default `stop` logs the step, then exits
        1 naming it."""
        with TempDir() as d:
            rng = np.random.RandomState(0)
            x = rng.randn(3, 4, 32).astype(np.float32)
            labels = rng.randint(0, 10, (3, 4)).astype(np.int64)
            x[1, 2, 5] = np.nan
            bad, clean = os.path.join(d, "bad.npz"), os.path.join(d, "clean.npz")
            np.savez(bad, x=x, labels=labels)
            np.savez(clean, x=x[[0, 2]], labels=labels[[0, 2]])
            art = os.path.join(d, "m.ortc")
            run([ORTC, "build", sample_path("mlp"), "-o", art, "--dim", "batch=4", "--optimizer", "adamw"])

            def train(feed, steps, *extra):
                log, out = os.path.join(d, "log.jsonl"), os.path.join(d, "p.npz")
                p = subprocess.run([ORTC_RUN, "train", art, "--data", feed, "--steps", str(steps), "--lr", "0.01",
                                    "--log-json", log, "--save-checkpoint", out] + list(extra),
                                   capture_output=True, text=True, env=ENV)
                with open(log) as f:
                    records = [json.loads(line) for line in f]
                return p, records, (dict(np.load(out)) if p.returncode == 0 else None)

            p, records, skipped = train(bad, 3, "--on-nonfinite", "skip")
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertEqual([r["finite"] for r in records], [True, False, True])
            self.assertIsNone(records[1]["loss"])
            self.assertIn("step 2 skipped: not finite: input 'x' holds nan at [2, 5] (its first "
                          "NaN/Inf; batch 2 of 3 in the feed)", p.stdout)
            p, _, never = train(clean, 2)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertEqual(sorted(skipped), sorted(never))
            for k in never:
                np.testing.assert_array_equal(skipped[k], never[k], err_msg=k)

            p, records, _ = train(bad, 3)
            self.assertEqual(p.returncode, 1)
            self.assertIn("step 2: not finite: input 'x' holds nan at [2, 5]", p.stderr)
            self.assertEqual([r["finite"] for r in records], [True, False])


class Profile(unittest.TestCase):
    def test_profile_times_every_launch_and_names_its_node(self):
        # ORTC_PROFILE: per launch of the step program, its kernel, ONNX node, op,
        # calls and time; shared kernels are timed per launch, not merged. A function's
        # first run (one-time JIT and plan work) is timed apart, as warmup_ms.
        with TempDir() as d:
            art = os.path.join(d, "cnn.ortc")
            run([ORTC, "build", sample_path("cnn"), "-o", art, "--dim", "batch=8"])
            prof = os.path.join(d, "profile.json")
            p = subprocess.run([ORTC_RUN, "train", art, "--data", feed(d, 8), "--steps", "3", "--quiet"],
                               env=dict(ENV, ORTC_PROFILE=prof), capture_output=True, text=True)
            self.assertEqual(p.returncode, 0, p.stderr)
            with open(prof) as f:
                r = json.load(f)
            with open(os.path.join(art, "manifest.json")) as f:
                launches = json.load(f)["functions"]["train_step"]["launches"]
            train = [l for l in r["launches"] if l["function"] == "train_step"]
            self.assertEqual(len(train), len(launches))
            self.assertTrue(all(l["calls"] == 2 for l in train))
            self.assertTrue(all(l["warmup_ms"] >= 0 for l in train))
            self.assertGreater(sum(l["warmup_ms"] for l in train), 0)
            self.assertTrue(all(abs(l["mean_ms"] - l["total_ms"] / 2) < 1e-9 for l in train))
            self.assertEqual([l["total_ms"] for l in r["launches"]],
                             sorted((l["total_ms"] for l in r["launches"]), reverse=True))
            self.assertAlmostEqual(sum(l["warmup_ms"] for l in r["launches"]), r["warmup_ms"],
                                   places=6)
            conv = [l for l in train if l["op"] == "conv"]
            self.assertTrue(conv and all(l["node"] for l in conv))
            self.assertAlmostEqual(sum(r["by_op_ms"].values()), r["total_ms"], places=6)


class CpuLevels(unittest.TestCase):
    def build(self, d, *args):
        art = os.path.join(d, "m.ortc")
        run([ORTC, "build", sample_path("mlp"), "-o", art, "--dim", "batch=4"] + list(args))
        with open(os.path.join(art, "manifest.json")) as f:
            return art, json.load(f)

    def mlp_feed(self, d):
        r = np.random.RandomState(0)
        path = os.path.join(d, "feed.npz")
        np.savez(path, x=r.randn(4, 32).astype(np.float32),
                 labels=r.randint(0, 10, size=(4,)).astype(np.int64))
        return path

    def train(self, art, data):
        return subprocess.run([ORTC_RUN, "train", art, "--data", data, "--steps", "2"],
                              env=ENV, capture_output=True, text=True)

    def test_default_level_and_native_are_recorded(self):
        flags = cpu_flags()
        with TempDir() as d:
            _, m = self.build(d)
            self.assertEqual(m["arch"], ["x86-64-v3"])
            self.assertNotIn("cpu_features", m)
            _, m = self.build(d, "--cpu", "native")
            self.assertEqual(m["arch"], ["native"])
            self.assertTrue(set(m["cpu_features"]) <= flags, m["cpu_features"])
            self.assertTrue(set(LEVEL_FLAGS["x86-64-v2"]) & flags <= set(m["cpu_features"]))

    def test_refuses_a_level_this_cpu_lacks(self):
        flags, need = cpu_flags(), set()
        missing_level = None
        for level in LEVELS:
            need |= set(LEVEL_FLAGS[level])
            if not need <= flags:
                missing_level = level
                break
        with TempDir() as d:
            if missing_level:
                art, _ = self.build(d, "--cpu", missing_level)
                lacking = sorted(need - flags)
            else:
                # This CPU runs every level: a native artifact from a machine with one more
                # extension than this one.
                art, m = self.build(d, "--cpu", "native")
                m["cpu_features"].append("amx_fp8")
                with open(os.path.join(art, "manifest.json"), "w") as f:
                    json.dump(m, f)
                lacking, missing_level = ["amx_fp8"], "--cpu native"
            p = self.train(art, os.path.join(d, "none.npz"))
            self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
            self.assertIn(missing_level.replace("--cpu ", ""), p.stderr)
            self.assertIn("lacks ", p.stderr)
            for flag in lacking:
                self.assertIn(flag, p.stderr.split("lacks ", 1)[1])
            with open("/proc/cpuinfo") as f:
                model = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), "")
            self.assertIn(model, p.stderr)
            self.assertIn("rebuild with --cpu", p.stderr)

    def test_every_level_this_cpu_has_trains_alike(self):
        flags, need, losses = cpu_flags(), set(), {}
        with TempDir() as d:
            data = self.mlp_feed(d)
            for level in LEVELS:
                need |= set(LEVEL_FLAGS[level])
                if not need <= flags:
                    break
                art, _ = self.build(d, "--cpu", level)
                log = os.path.join(d, level + ".jsonl")
                run([ORTC_RUN, "train", art, "--data", data, "--steps", "3", "--log-json", log])
                losses[level] = log_losses(log)
            self.assertIn("x86-64-v2", losses)
            for level, ls in losses.items():
                np.testing.assert_allclose(ls, losses["x86-64-v2"], rtol=1e-5, err_msg=level)

    def test_cpu_option_errors(self):
        with TempDir() as d:
            p = subprocess.run([ORTC, "build", sample_path("mlp"), "-o", os.path.join(d, "a"),
                                "--dim", "batch=4", "--cpu", "x86-64-v9"],
                               env=ENV, capture_output=True, text=True)
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertIn("--cpu", p.stderr)
            p = subprocess.run([ORTC, "build", sample_path("mlp"), "-o", os.path.join(d, "a"),
                                "--dim", "batch=4", "--target", "cuda", "--cpu", "x86-64-v3"],
                               env=ENV, capture_output=True, text=True)
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertIn("--cpu is for --target cpu", p.stderr)
            self.assertFalse(os.path.exists(os.path.join(d, "a")))


if __name__ == "__main__":
    unittest.main()
