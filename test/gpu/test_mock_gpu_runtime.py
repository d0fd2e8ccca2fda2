# Why: the runtime's GPU path (device tensors with a lazily synced host mirror, graph
# capture at a function's second run and replay afterwards, checkpoints through the
# mirror, arch and no-device errors) must be tested where CI runs: without a GPU. This
# turns a CPU artifact into a "cuda" one whose kernels.so carries the same CPU kernels
# behind GPU-signature launchers plus a host-memory stand-in for the device API
# (mock_gpu_glue.inc), then checks that ortc-run trains it exactly like the CPU artifact.
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import unittest

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from ortc_testlib import ENV, ORTC, ORTC_RUN, TempDir, run, sample_path  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def load_json(path):
    with open(path) as f:
        return json.load(f)


def read_lines(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


def to_mock_gpu(cpu_dir, out_dir, arch="sm_90"):
    """A cuda-target copy of the CPU artifact `cpu_dir` running on the mock device."""
    os.makedirs(out_dir)
    m = load_json(os.path.join(cpu_dir, "manifest.json"))
    units = sorted(f for f in m["files"] if re.fullmatch(r"kernels_\d+\.cpp", f))
    # Each CPU kernel becomes cpu_<name> in its unit; one glue unit gives every name
    # the GPU launcher signature over the mock device.
    names = []
    kernel = re.compile(r'extern "C" void (ortc_\w+)\(void \*const \*ptrs\) \{')
    for u in units:
        with open(os.path.join(cpu_dir, u)) as f:
            src = f.read()
        names += kernel.findall(src)
        with open(os.path.join(out_dir, u), "w") as f:
            f.write(kernel.sub(r'extern "C" void cpu_\1(void *const *ptrs) {', src))
    glue = '#include "mock_gpu_glue.inc"\n\n'
    for n in names:
        glue += ('extern "C" void cpu_%s(void *const *ptrs);\n'
                 'extern "C" void %s(void *const *ptrs, void *) { mock::launch(cpu_%s, ptrs); }\n' % (n, n, n))
    with open(os.path.join(out_dir, "mock_launchers.cpp"), "w") as f:
        f.write(glue)
    for name in ("ortc_kernels.h", "ortc_kernel_abi.h", "params.bin"):
        shutil.copy(os.path.join(cpu_dir, name), out_dir)
    shutil.copy(os.path.join(HERE, "mock_gpu_glue.inc"), out_dir)
    # The CPU artifact's flags (codegen/Artifact.cpp), so both train bit for bit alike.
    run(["c++", "-std=c++17", "-O1", "-march=x86-64-v3", "-fno-math-errno", "-fno-trapping-math",
         "-fPIC", "-shared", "-fopenmp", "-DORTC_KERN_DNNL", "-o", os.path.join(out_dir, "kernels.so")]
        + [os.path.join(out_dir, u) for u in units + ["mock_launchers.cpp"]] + ["-ldnnl", "-lmvec"])
    m["target"], m["arch"] = "cuda", [arch]
    params_digest = m["files"]["params.bin"]  # copied unchanged (an XXH3-128 digest)
    m["files"] = {"params.bin": params_digest}
    for name in units + ["mock_launchers.cpp", "kernels.so", "ortc_kernels.h", "ortc_kernel_abi.h"]:
        with open(os.path.join(out_dir, name), "rb") as f:
            m["files"][name] = hashlib.sha256(f.read()).hexdigest()
    with open(os.path.join(out_dir, "manifest.json"), "w") as f:
        json.dump(m, f, indent=2)
    return out_dir


def write_feed(manifest_path, path, rng):
    m = load_json(manifest_path)
    inputs = set(m["functions"]["train_step"]["inputs"])
    arrays = {}
    for t in m["tensors"]:
        if t["role"] == "input" and t["name"] in inputs:
            if t["dtype"] == "f32":
                arrays[t["name"]] = rng.uniform(-1, 1, t["shape"]).astype(np.float32)
            else:
                arrays[t["name"]] = rng.integers(0, 2, t["shape"]).astype(np.int64)
    np.savez(path, **arrays)


class MockGpuRuntime(unittest.TestCase):
    def train(self, artifact, feed, work, tag, steps=5, extra=(), env=None):
        log, params, stats = (os.path.join(work, tag + s) for s in (".jsonl", ".npz", "-stats.json"))
        e = dict(ENV, MOCK_GPU_STATS=stats, **(env or {}))
        p = subprocess.run([ORTC_RUN, "train", artifact, "--data", feed, "--steps", str(steps), "--lr", "0.05",
                            "--quiet", "--log-json", log, "--save-params", params] + list(extra),
                           capture_output=True, text=True, env=e)
        self.assertEqual(p.returncode, 0, p.stderr)
        losses = [r["loss"] for r in read_lines(log)]
        counts = load_json(stats) if os.path.exists(stats) else None
        with np.load(params) as z:
            return losses, dict(z), counts

    def check_sample(self, work, sample, flags):
        cpu = os.path.join(work, "cpu.ortc")
        run([ORTC, "build", sample_path(sample), "--dim", "batch=4", "-o", cpu] + flags)
        gpu = to_mock_gpu(cpu, os.path.join(work, "gpu.ortc"))
        feed = os.path.join(work, "feed.npz")
        write_feed(os.path.join(cpu, "manifest.json"), feed, np.random.default_rng(0))
        ref = self.train(cpu, feed, work, "cpu")
        graphs = self.train(gpu, feed, work, "graphs")
        eager = self.train(gpu, feed, work, "eager", extra=["--no-graphs"])
        for got in (graphs, eager):
            self.assertEqual(got[0], ref[0])  # the same kernels, bit for bit
            for k in ref[1]:
                np.testing.assert_array_equal(got[1][k], ref[1][k], err_msg=k)
        manifest = load_json(os.path.join(gpu, "manifest.json"))
        kernels = len(manifest["functions"]["train_step"]["launches"])
        g, e = graphs[2], eager[2]
        # Graphs: step 1 eager, step 2 captured (nothing runs) then replayed, 3-5 replayed.
        self.assertEqual((g["captures"], g["graph_launches"]), (1, 4), g)
        self.assertEqual(g["eager_kernels"], kernels)
        self.assertEqual(g["replayed_kernels"], 4 * kernels)
        self.assertEqual((e["captures"], e["graph_launches"], e["eager_kernels"]), (0, 0, 5 * kernels), e)
        # Only what the host changed goes up after the first step (the lr and seed
        # scalars are rebound every step), and downloads are lazy: the loss and the
        # finite flag per step, the parameters once at the end.
        n_tensors = len(manifest["tensors"])
        self.assertLess(g["uploads"], n_tensors + 5 * 6, g)
        self.assertLess(g["downloads"], 5 * 3 + n_tensors, g)

        # A checkpoint taken after 3 steps through the host mirror resumes to the same
        # 5-step result.
        ck = os.path.join(work, "ck.npz")
        self.train(gpu, feed, work, "first3", steps=3, extra=["--save-checkpoint", ck])
        resumed = self.train(gpu, feed, work, "last2", steps=2, extra=["--load-checkpoint", ck])
        self.assertEqual(resumed[0], ref[0][3:])
        for k in ref[1]:
            np.testing.assert_array_equal(resumed[1][k], ref[1][k], err_msg=k)
        return gpu, feed

    def test_mlp_sgd(self):
        with TempDir() as work:
            self.check_sample(work, "mlp", ["--optimizer", "sgd", "--momentum", "0.9"])

    def test_gpt2_adamw(self):
        with TempDir() as work:
            self.check_gpt2(work)

    def check_gpt2(self, work):
        gpu, feed = self.check_sample(work, "gpt2", ["--optimizer", "adamw"])
        # The arch check: a GPU the artifact has no code for, and no GPU at all.
        for arch, want in (("sm_75", "built for sm_90, but this GPU is sm_75: rebuild with "
                                     "`ortc build --target cuda --arch sm_75`"),
                           ("sm_80", "built for sm_90, but this GPU is sm_80"),
                           ("none", "a cuda artifact needs an NVIDIA GPU, and there is none: "
                                    "no GPU is visible")):
            p = subprocess.run([ORTC_RUN, "train", gpu, "--data", feed, "--steps", "1"], capture_output=True,
                               text=True, env=dict(ENV, MOCK_GPU_ARCH=arch))
            self.assertEqual(p.returncode, 1, p.stderr)
            self.assertIn(want, p.stderr)
        # sm_90 code runs on a later sm_9x GPU.
        p = subprocess.run([ORTC_RUN, "train", gpu, "--data", feed, "--steps", "1", "--quiet"],
                           capture_output=True, text=True, env=dict(ENV, MOCK_GPU_ARCH="sm_92"))
        self.assertEqual(p.returncode, 0, p.stderr)
        # With the PTX of sm_90 ("compute_90", ortc build's default), any later GPU runs it
        # (its driver compiles the PTX); an earlier one is still refused.
        path = os.path.join(gpu, "manifest.json")
        m = load_json(path)
        m["arch"] = ["sm_90", "compute_90"]
        with open(path, "w") as f:
            json.dump(m, f)
        for arch, want in (("sm_120", 0), ("sm_100", 0), ("sm_89", 1)):
            p = subprocess.run([ORTC_RUN, "train", gpu, "--data", feed, "--steps", "1", "--quiet"],
                               capture_output=True, text=True, env=dict(ENV, MOCK_GPU_ARCH=arch))
            self.assertEqual(p.returncode, want, "%s: %s" % (arch, p.stderr))
        self.assertIn("built for sm_90, compute_90, but this GPU is sm_89", p.stderr)


if __name__ == "__main__":
    unittest.main()
