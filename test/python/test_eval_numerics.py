# The reference evaluator on every sample: forward outputs equal onnxruntime's, and the
# loss, every parameter gradient and the BatchNorm running statistics equal PyTorch's in
# float64 within 1e-9 relative.
import os
import unittest

import numpy as np
import onnxruntime as ort

from ortc_testlib import (BUILD, SAMPLES, TempDir, feed_of, reference, rel_err, run, sample_path,
                          without_dropout)

ORTC_EVAL = os.path.join(BUILD, "tools", "ortc-eval", "ortc-eval")
MAX_ERRORS = {}


class EvalNumerics(unittest.TestCase):
    def forward(self, name):
        with TempDir() as d:
            ref = reference(name, d, "--dtype", "float32", "--no-dropout")
            model = without_dropout(name, d)
            feed = {k: v for k, v in feed_of(ref).items() if k != "labels"}
            np.savez(os.path.join(d, "in.npz"), **feed)
            run([ORTC_EVAL, model, "--dim", "batch=4", "--inputs", os.path.join(d, "in.npz"),
                 "-o", os.path.join(d, "out.npz")])
            ours = dict(np.load(os.path.join(d, "out.npz")))
            so = ort.SessionOptions()
            # ORT's fusions ignore BatchNorm's training_mode; compare the plain graph.
            so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
            sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
            theirs = sess.run(None, feed)
            for out, value in zip(sess.get_outputs(), theirs):
                err = rel_err(ours[out.name], value)
                self.assertLess(err, 1e-5, "%s: output %s off by %.2e" % (name, out.name, err))

    def gradients(self, name):
        with TempDir() as d:
            ref = reference(name, d, "--dtype", "float64", "--no-dropout")
            model = without_dropout(name, d)
            np.savez(os.path.join(d, "in.npz"), **feed_of(ref))
            run([ORTC_EVAL, model, "--dim", "batch=4", "--gradients", "--inputs",
                 os.path.join(d, "in.npz"), "-o", os.path.join(d, "out.npz")])
            ours = dict(np.load(os.path.join(d, "out.npz")))
            worst = rel_err(ours["loss"], ref["loss_0"])
            self.assertLess(worst, 1e-9, "%s: loss" % name)
            trainable = [k[len("grad/"):] for k in ref if k.startswith("grad/")]
            self.assertEqual(sorted(k[len("grad/"):] for k in ours if k.startswith("grad/")),
                             sorted(trainable), "%s: parameters differ from PyTorch's" % name)
            # Relative to the tensor, but never below a floor of the largest gradient:
            # some gradients are exactly zero in exact arithmetic (BERT's key bias: softmax
            # ignores a per-row constant), so both sides hold only rounding noise there.
            floor = 1e-6 * max(np.linalg.norm(v) for k, v in ref.items() if k.startswith("grad/"))
            for key in [k for k in ref if k.startswith(("grad/", "buffer/"))]:
                err = float(np.linalg.norm(ours[key] - ref[key]) / max(np.linalg.norm(ref[key]), floor))
                worst = max(worst, err)
                self.assertLess(err, 1e-9, "%s: %s off by %.2e" % (name, key, err))
            print("%s: max relative error vs PyTorch (float64): %.2e" % (name, worst))


    def fused_equal(self, name):
        """Kernel formation changes which ops share a kernel, never a number: the
        evaluator runs the ortc.fused regions and must give the unfused results (float64,
        Dropout kept, forward outputs and every gradient)."""
        with TempDir() as d:
            ref = reference(name, d, "--dtype", "float64", "--no-dropout")
            np.savez(os.path.join(d, "in.npz"), **feed_of(ref))
            outs = {}
            for mode in ("plain", "fused"):
                path = os.path.join(d, mode + ".npz")
                run([ORTC_EVAL, sample_path(name), "--dim", "batch=4", "--gradients", "--seed", "3",
                     "--inputs", os.path.join(d, "in.npz"), "-o", path]
                    + (["--fused"] if mode == "fused" else []))
                outs[mode] = dict(np.load(path))
            self.assertEqual(sorted(outs["plain"]), sorted(outs["fused"]))
            for key, value in outs["plain"].items():
                err = rel_err(outs["fused"][key], value)
                self.assertLessEqual(err, 1e-12, "%s: %s fused vs unfused off by %.2e" % (name, key, err))


for _name in SAMPLES:
    setattr(EvalNumerics, "test_fused_equal_%s" % _name, lambda self, n=_name: self.fused_equal(n))
    setattr(EvalNumerics, "test_forward_%s" % _name, lambda self, n=_name: self.forward(n))
    setattr(EvalNumerics, "test_gradients_%s" % _name, lambda self, n=_name: self.gradients(n))

if __name__ == "__main__":
    unittest.main()
