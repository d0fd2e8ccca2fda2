# `ortc export` (issue 22): the trained model back as ONNX. A model with BatchNorm and
# Dropout, exported by PyTorch in training mode, trains with ortc; the export holds the
# trained parameters and running statistics, and onnxruntime's inference on it gives
# ortc's eval_step loss. Without trained values it round-trips the model's own weights;
# bad inputs are named.
import os
import subprocess
import unittest
import warnings

import numpy as np
import onnx
from onnx import numpy_helper

from ortc_testlib import ENV, ORTC, TempDir, run


def model_and_data():
    import torch
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(12, 24), torch.nn.BatchNorm1d(24), torch.nn.ReLU(),
                                torch.nn.Dropout(0.2), torch.nn.Linear(24, 4))
    rs = np.random.RandomState(0)
    return (model, rs.randn(6, 8, 12).astype(np.float32), rs.randint(0, 4, (6, 8)),
            rs.randn(2, 8, 12).astype(np.float32), rs.randint(0, 4, (2, 8)))


def softmax_ce(logits, labels):
    z = logits - logits.max(1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(1, keepdims=True))
    return float(-logp[np.arange(len(labels)), labels].mean())


class Export(unittest.TestCase):
    def test_trained_export_runs_in_onnxruntime_as_ortc_evaluates(self):
        import onnxruntime as ort
        import torch
        model, x, y, ex, ey = model_and_data()
        with TempDir() as d:
            onnx_path, art = os.path.join(d, "m.onnx"), os.path.join(d, "m.ortc")
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                torch.onnx.export(model, torch.from_numpy(x[0]), onnx_path, opset_version=17,
                                  training=torch.onnx.TrainingMode.TRAINING,
                                  do_constant_folding=False, input_names=["x"],
                                  output_names=["logits"], dynamic_axes={"x": {0: "batch"}})
            run([ORTC, "build", onnx_path, "-o", art, "--dim", "batch=8", "--optimizer", "adamw"])
            self.assertTrue(os.path.exists(os.path.join(art, "model.onnx")))
            feed, evalf = os.path.join(d, "feed.npz"), os.path.join(d, "eval.npz")
            np.savez(feed, x=x, labels=y)
            np.savez(evalf, x=ex, labels=ey)
            params, ckpt = os.path.join(d, "p.npz"), os.path.join(d, "c.npz")
            out = run([ORTC, "train", art, "--data", feed, "--steps", "6", "--lr", "0.01",
                       "--save-params", params, "--save-checkpoint", ckpt, "--eval",
                       "--eval-data", evalf]).stdout
            ortc_eval = float(out.split("eval loss ")[1].split()[0])
            trained = dict(np.load(params))

            exported = os.path.join(d, "trained.onnx")
            run([ORTC, "export", art, "--params", params, "-o", exported])
            m = onnx.load(exported)
            inits = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
            for name, value in trained.items():   # parameters and running statistics
                np.testing.assert_array_equal(inits[name], value, err_msg=name)
            original = {t.name: numpy_helper.to_array(t) for t in onnx.load(onnx_path).graph.initializer}
            stats = [k for k in trained if "running_mean" in k or "running_var" in k]
            self.assertEqual(len(stats), 2)
            for k in stats:
                self.assertFalse(np.array_equal(original[k], trained[k]), "%s never moved" % k)
            # The graph as given (symbolic batch kept), in inference mode.
            self.assertEqual(m.graph.input[0].type.tensor_type.shape.dim[0].dim_param, "batch")
            for n in m.graph.node:
                if n.op_type == "BatchNormalization":
                    self.assertEqual(len(n.output), 1)
                    self.assertEqual([a.i for a in n.attribute if a.name == "training_mode"], [0])
            onnx.checker.check_model(m)

            sess = ort.InferenceSession(exported, providers=["CPUExecutionProvider"])
            losses = [softmax_ce(sess.run(None, {"x": b})[0].astype(np.float64), l)
                      for b, l in zip(ex, ey)]
            self.assertAlmostEqual(np.mean(losses), ortc_eval, delta=2e-5 * abs(ortc_eval))
            # A checkpoint gives the same model (its optimizer state is left out).
            from_ckpt = os.path.join(d, "from_ckpt.onnx")
            run([ORTC, "export", art, "--checkpoint", ckpt, "-o", from_ckpt])
            with open(from_ckpt, "rb") as a, open(exported, "rb") as b:
                self.assertEqual(a.read(), b.read())

    def test_untrained_export_round_trips_and_bad_inputs_are_named(self):
        import torch
        model, x, *_ = model_and_data()
        with TempDir() as d:
            onnx_path, art = os.path.join(d, "m.onnx"), os.path.join(d, "m.ortc")
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                torch.onnx.export(model.eval(), torch.from_numpy(x[0]), onnx_path, opset_version=17,
                                  do_constant_folding=False, input_names=["x"], output_names=["logits"])
            run([ORTC, "build", onnx_path, "-o", art])
            same = os.path.join(d, "same.onnx")
            run([ORTC, "export", art, "-o", same])
            got = {t.name: numpy_helper.to_array(t) for t in onnx.load(same).graph.initializer}
            want = {t.name: numpy_helper.to_array(t) for t in onnx.load(onnx_path).graph.initializer}
            self.assertEqual(sorted(got), sorted(want))
            for k in want:
                np.testing.assert_array_equal(got[k], want[k], err_msg=k)

            def refused(args, status, needle):
                p = subprocess.run([ORTC, "export"] + args, capture_output=True, text=True, env=ENV)
                self.assertEqual(p.returncode, status, p.stderr)
                self.assertIn(needle, p.stderr)
            bad = os.path.join(d, "bad.npz")
            np.savez(bad, **{"0.weight": np.zeros((3, 3), np.float32)})
            refused([art, "--params", bad, "-o", os.path.join(d, "o.onnx")], 1,
                    "'0.weight' is float32 (<f4) [3,3], the artifact's tensor is f32 [24,12]")
            np.savez(bad, nosuch=np.zeros(1, np.float32))
            refused([art, "--params", bad, "-o", os.path.join(d, "o.onnx")], 1,
                    "'nosuch' is no tensor of")
            refused([os.path.join(d, "nowhere.ortc"), "-o", os.path.join(d, "o.onnx")], 1,
                    "not an ortc artifact")
            refused([art, "--params", bad, "--checkpoint", bad, "-o", os.path.join(d, "o.onnx")], 2,
                    "excludes")
            with open(os.path.join(art, "model.onnx"), "ab") as f:
                f.write(b"\0")
            refused([art, "-o", os.path.join(d, "o.onnx")], 1, "model.onnx: SHA-256 differs")
            self.assertFalse(os.path.exists(os.path.join(d, "o.onnx")))


if __name__ == "__main__":
    unittest.main()
