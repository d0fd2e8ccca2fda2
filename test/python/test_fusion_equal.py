# Kernel formation changes which ops share a kernel, never a number: on every model of the
# zoo (test/zoo: PyTorch 2.x exports of real-world models), the reference evaluator runs the
# training step's forward and backward in float64 with the ortc.fused regions that codegen
# prints (ortc-eval --fused) and without them, and the loss, every gradient and every
# BatchNorm statistic must agree to 1e-12 relative. (The zoo test trains the fused artifacts
# against PyTorch's float64 run; this one isolates fusion from float32 rounding.)
import json
import os
import re
import unittest
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ortc_testlib import BUILD, ROOT, TempDir, rel_err, run

ORTC_EVAL = os.path.join(BUILD, "tools", "ortc-eval", "ortc-eval")
ZOO = os.path.join(ROOT, "test", "zoo")


def evaluate(entry, d, fused):
    ref = np.load(os.path.join(ZOO, entry["file"] + ".npz"))
    feed = {n["name"]: ref[n["name"]] for n in entry["inputs"]}
    feed["labels"] = ref["labels"]
    np.savez(os.path.join(d, "in.npz"), **feed)
    out = os.path.join(d, "fused.npz" if fused else "plain.npz")
    p = run([ORTC_EVAL, os.path.join(ZOO, entry["file"] + ".onnx"), "--gradients", "--seed", "5",
             "--inputs", os.path.join(d, "in.npz"), "-o", out] + (["--fused"] if fused else []))
    kernels = int(re.search(r"(\d+) fused kernels", p.stderr).group(1)) if fused else 0
    return dict(np.load(out)), kernels


def compare(entry):
    with TempDir() as d:
        (plain, _), (fused, kernels) = evaluate(entry, d, False), evaluate(entry, d, True)
    problems = [] if kernels else ["no fused kernel formed"]
    if sorted(plain) != sorted(fused):
        problems.append("different results: %s vs %s" % (sorted(plain), sorted(fused)))
    for key, value in plain.items():
        if key in fused:
            err = rel_err(fused[key], value)
            if not err <= 1e-12:
                problems.append("%s off by %.2e" % (key, err))
    return entry["file"], "%d tensors, %d kernels" % (len(plain), kernels), problems


class FusionEqual(unittest.TestCase):
    def test_zoo_fused_equals_unfused_in_float64(self):
        with open(os.path.join(ZOO, "zoo.json")) as f:
            files = json.load(f)["files"]
        with ThreadPoolExecutor(2) as pool:
            results = list(pool.map(compare, files))
        for name, count, problems in results:
            print("%-28s %s: %s" % (name, count, "; ".join(problems) or "equal"))
        self.assertEqual([(n, p) for n, _, p in results if p], [])


if __name__ == "__main__":
    unittest.main()
