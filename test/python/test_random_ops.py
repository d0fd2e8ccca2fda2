# Dropout as training-mode exports write it (RandomUniformLike + Less + Where) and the other
# random ops (RandomNormalLike, Bernoulli) draw from ortc's counter-based generator, keyed by
# (seed, step, op, element): over 1e6 draws the kept fraction and the scaling match the
# ratio within 3 sigma, masks differ across elements, seeds and steps, and are identical for
# the same seed whatever the dtype (float32 and float64 runs of the evaluator, which shares
# the CPU kernel library). The compiled step draws a new mask every step: with lr 0 the loss
# changes from step to step, and a rerun with the same --seed repeats it exactly.
import json
import os
import unittest

import numpy as np
import onnx
from onnx import TensorProto, helper as h, numpy_helper as nh

from ortc_testlib import BUILD, ORTC, TempDir, run

ORTC_EVAL = os.path.join(BUILD, "tools", "ortc-eval", "ortc-eval")
RATIO = 0.25
N = 1000


def dropout_model(path, rows, cols, with_head=False):
    """y = Where(RandomUniformLike(x) < ratio, 0, x / (1 - ratio)), as torch 2.x writes it;
    with_head adds a Linear so that the model trains."""
    nodes = [
        h.make_node("RandomUniformLike", ["x"], ["r"], name="rand", seed=7.0),
        h.make_node("Less", ["r", "p"], ["drop"], name="less"),
        h.make_node("Mul", ["x", "s"], ["xs"], name="scale"),
        h.make_node("Where", ["drop", "zero", "xs"], ["y"], name="where"),
    ]
    inits = [nh.from_array(np.array(RATIO, np.float32), "p"),
             nh.from_array(np.array(1 / (1 - RATIO), np.float32), "s"),
             nh.from_array(np.array(0.0, np.float32), "zero")]
    out = "y"
    if with_head:
        rng = np.random.RandomState(0)
        inits.append(nh.from_array(rng.randn(cols, 3).astype(np.float32) * 0.1, "fc.weight"))
        nodes.append(h.make_node("MatMul", ["y", "fc.weight"], ["logits"], name="fc"))
        out = "logits"
    extra = [h.make_node("RandomNormalLike", ["x"], ["normal"], name="randn"),
             h.make_node("Bernoulli", ["bp"], ["bern"], name="bern")] if not with_head else []
    inputs = [h.make_tensor_value_info("x", TensorProto.FLOAT, [rows, cols])]
    outputs = [h.make_tensor_value_info(out, TensorProto.FLOAT, None)]
    if extra:
        nodes += extra
        inputs.append(h.make_tensor_value_info("bp", TensorProto.FLOAT, [rows, cols]))
        outputs += [h.make_tensor_value_info("normal", TensorProto.FLOAT, None),
                    h.make_tensor_value_info("bern", TensorProto.FLOAT, None)]
    g = h.make_graph(nodes, "g", inputs, outputs, inits)
    onnx.save(h.make_model(g, opset_imports=[h.make_opsetid("", 17)], ir_version=8), path)


class RandomOps(unittest.TestCase):
    def evaluate(self, d, model, seed, f32=False):
        out = os.path.join(d, "out-%d-%d.npz" % (seed, f32))
        run([ORTC_EVAL, model, "--inputs", os.path.join(d, "in.npz"), "-o", out, "--seed", str(seed)]
            + (["--f32"] if f32 else []))
        return dict(np.load(out))

    def test_statistics_and_keys(self):
        with TempDir() as d:
            model = os.path.join(d, "m.onnx")
            dropout_model(model, N, N)
            np.savez(os.path.join(d, "in.npz"), x=np.ones((N, N), np.float32),
                     bp=np.full((N, N), 0.3, np.float32))
            a = self.evaluate(d, model, 1)
            n = a["y"].size
            kept = a["y"] != 0
            sigma = np.sqrt(RATIO * (1 - RATIO) / n)
            self.assertLess(abs(kept.mean() - (1 - RATIO)), 3 * sigma, "kept fraction %r" % kept.mean())
            np.testing.assert_allclose(a["y"][kept], 1 / (1 - RATIO), rtol=1e-6)
            # Masks differ across elements (rows are not copies of each other).
            self.assertFalse(np.array_equal(kept[0], kept[1]))
            # Same seed: the same mask, in float32 as in float64; another seed: another mask.
            self.assertTrue(np.array_equal(kept, self.evaluate(d, model, 1, f32=True)["y"] != 0))
            self.assertTrue(np.array_equal(kept, self.evaluate(d, model, 1)["y"] != 0))
            other = self.evaluate(d, model, 2)["y"] != 0
            self.assertLess(abs((kept == other).mean() - (RATIO ** 2 + (1 - RATIO) ** 2)), 6 * sigma)
            # Normal draws: mean 0, standard deviation 1 (3 sigma of their estimators).
            z = a["normal"]
            self.assertLess(abs(z.mean()), 3 / np.sqrt(n))
            self.assertLess(abs(z.std() - 1), 3 * np.sqrt(0.5 / n))
            # Bernoulli(0.3): ones with probability 0.3, independent of the dropout mask.
            b = a["bern"]
            self.assertTrue(set(np.unique(b)) <= {0.0, 1.0})
            self.assertLess(abs(b.mean() - 0.3), 3 * np.sqrt(0.21 / n))
            self.assertLess(abs(np.corrcoef(b.ravel(), kept.ravel())[0, 1]), 6 / np.sqrt(n))

    def test_new_mask_every_step(self):
        with TempDir() as d:
            model = os.path.join(d, "m.onnx")
            dropout_model(model, 8, 64, with_head=True)
            rng = np.random.RandomState(0)
            np.savez(os.path.join(d, "feed.npz"), x=rng.randn(8, 64).astype(np.float32),
                     labels=rng.randint(0, 3, 8).astype(np.int64))
            art = os.path.join(d, "m.ortc")
            run([ORTC, "build", model, "-o", art])

            def losses(seed):
                log = os.path.join(d, "log-%d.jsonl" % seed)
                run([ORTC, "train", art, "--data", os.path.join(d, "feed.npz"), "--steps", "4",
                     "--lr", "0", "--seed", str(seed), "--log-json", log])
                with open(log) as f:
                    return [json.loads(line)["loss"] for line in f]
            first = losses(3)
            self.assertEqual(len(set(first)), 4, "same loss at lr 0 in different steps: %r" % first)
            self.assertEqual(first, losses(3))
            self.assertNotEqual(first, losses(4))


if __name__ == "__main__":
    unittest.main()
