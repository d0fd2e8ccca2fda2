# The `ortc` Python module (issue 22): a sample trained from Python is `ortc train`'s run
# bit for bit (losses and parameters), parameters are numpy views of the session (no
# copy; writing them changes what the next step computes), checkpoints written from
# Python resume in `ortc train`, and bad feeds raise with the input named.
import json
import math
import os
import sys
import unittest

import numpy as np

from ortc_testlib import BUILD, ORTC, TempDir, log_losses, run, sample_path

sys.path.insert(0, os.path.join(BUILD, "python"))
import ortc  # noqa: E402  (the module built in BUILD/python)

STEPS, LR = 6, 0.05


class PythonBinding(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = TempDir()
        d = cls.d = cls.tmp.__enter__()
        cls.art = os.path.join(d, "m.ortc")
        run([ORTC, "build", sample_path("mlp"), "--dim", "batch=4", "--optimizer", "adamw",
             "-o", cls.art])
        rs = np.random.RandomState(0)
        cls.x = rs.randn(3, 4, 32).astype(np.float32)
        cls.y = rs.randint(0, 10, (3, 4))
        cls.feed = os.path.join(d, "feed.npz")
        np.savez(cls.feed, x=cls.x, labels=cls.y)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.__exit__(None, None, None)

    def batch(self, i):
        return {"x": self.x[i % 3], "labels": self.y[i % 3]}

    def test_trains_as_ortc_train(self):
        log, params = os.path.join(self.d, "log.jsonl"), os.path.join(self.d, "p.npz")
        run([ORTC, "train", self.art, "--data", self.feed, "--steps", str(STEPS), "--lr", str(LR),
             "--log-json", log, "--save-params", params])
        want = log_losses(log)
        s = ortc.Artifact(self.art).session()
        got = [s.step(self.batch(i), lr=LR)["loss"] for i in range(STEPS)]
        # The log's 9 digits name each float32 loss exactly.
        self.assertEqual(np.float32(got).tolist(), np.float32(want).tolist())
        trained = np.load(params)
        params_now = s.parameters()
        self.assertEqual(sorted(params_now), sorted(trained.files))
        for k in trained.files:
            np.testing.assert_array_equal(params_now[k], trained[k], err_msg=k)
        ev = s.eval(self.batch(0))
        self.assertTrue(0 <= ev["correct"] <= ev["counted"] == 4)

    def test_accumulation_and_eval_as_ortc_train(self):
        """accumulate() then step(grad_scale=1/2) is a step of `ortc train --grad-accum 2`: the same
        parameters bit for bit, the micro-batches' mean loss; eval() over a feed gives the
        eval record's loss."""
        art, feed = os.path.join(self.d, "acc.ortc"), os.path.join(self.d, "acc.npz")
        run([ORTC, "build", sample_path("mlp"), "--dim", "batch=4", "--optimizer", "adamw",
             "--grad-accum", "-o", art])
        rs = np.random.RandomState(1)
        x, y = rs.randn(4, 4, 32).astype(np.float32), rs.randint(0, 10, (4, 4))
        np.savez(feed, x=x, labels=y)
        log, params = os.path.join(self.d, "acc.jsonl"), os.path.join(self.d, "acc-p.npz")
        run([ORTC, "train", art, "--data", feed, "--steps", "2", "--grad-accum", "2", "--lr", str(LR),
             "--eval-data", feed, "--eval-every", "2", "--log-json", log, "--save-params", params,
             "--quiet"])
        with open(log) as f:
            records = [json.loads(line) for line in f]
        s = ortc.Artifact(art).session()
        for i in range(2):
            first = s.accumulate({"x": x[2 * i], "labels": y[2 * i]})["loss"]
            last = s.step({"x": x[2 * i + 1], "labels": y[2 * i + 1]}, lr=LR, grad_scale=0.5)["loss"]
            self.assertAlmostEqual((float(first) + float(last)) / 2, records[i]["loss"], delta=1e-6)
        trained = np.load(params)
        for k, v in s.parameters().items():
            np.testing.assert_array_equal(v, trained[k], err_msg=k)
        ev = [s.eval({"x": x[i], "labels": y[i]})["loss"] for i in range(4)]
        self.assertAlmostEqual(float(np.mean(np.float64(ev))), records[2]["eval_loss"], delta=1e-6)

    def test_parameters_are_views_of_the_session(self):
        s = ortc.Artifact(self.art).session()
        w = s.parameters()["net.4.weight"]
        before = w.copy()
        s.step(self.batch(0), lr=LR)
        self.assertFalse(np.array_equal(w, before), "the view did not see the update")
        self.assertFalse(w.flags["OWNDATA"])
        # Zero logits: the next loss is log(10) exactly as far as float32 goes.
        for name, p in s.parameters().items():
            if name.startswith("net.4."):
                p[...] = 0
        self.assertAlmostEqual(s.step(self.batch(1), lr=0.0)["loss"], math.log(10), places=6)
        # A view outlives the Python session object that made it.
        view = ortc.Artifact(self.art).session().tensor("net.0.bias")
        self.assertEqual(view.shape, (64,))

    def test_checkpoint_from_python_resumes_in_ortc_train(self):
        ckpt, log = os.path.join(self.d, "c.npz"), os.path.join(self.d, "whole.jsonl")
        s = ortc.Artifact(self.art).session()
        for i in range(3):
            s.step(self.batch(i), lr=LR)
        s.save_checkpoint(ckpt)
        run([ORTC, "train", self.art, "--data", self.feed, "--steps", "5", "--lr", str(LR),
             "--log-json", log])
        # The resumed run goes on from micro-batch 3 of the feed, as the unbroken one did.
        rest = os.path.join(self.d, "rest.jsonl")
        run([ORTC, "train", self.art, "--data", self.feed, "--steps", "2",
             "--lr", str(LR), "--load-checkpoint", ckpt, "--log-json", rest])
        whole, resumed = log_losses(log), log_losses(rest)
        self.assertEqual(whole[3:], resumed)
        t = ortc.Artifact(self.art).session()
        t.load_checkpoint(ckpt)
        self.assertEqual(np.float32(t.step(self.batch(3), lr=LR)["loss"]), np.float32(whole[3]))

    def test_bad_feeds_raise_naming_the_input(self):
        s = ortc.Artifact(self.art).session()
        with self.assertRaisesRegex(ValueError, r"feed 'x' has shape \[3, 32\], the model's input is \[4, 32\]"):
            s.step({"x": self.x[0][:3], "labels": self.y[0]})
        with self.assertRaisesRegex(KeyError, "no tensor 'nope'"):
            s.step({"nope": self.x[0]})
        with self.assertRaisesRegex(RuntimeError, "labels"):
            ortc.Artifact(self.art).session().step({"x": self.x[0]})
        with self.assertRaisesRegex(RuntimeError, "manifest"):
            ortc.Artifact(self.d)

    def test_out_of_range_label_changes_nothing(self):
        """The kernels check the labels on the device: the step with label 99 is refused by
        the finite flag (parameters and optimizer state unchanged), then named."""
        s = ortc.Artifact(self.art).session()
        s.step(self.batch(0), lr=LR)
        before = {k: v.copy() for k, v in s.parameters().items()}
        bad = dict(self.batch(1))
        bad["labels"] = bad["labels"].copy()
        bad["labels"][2] = 99
        with self.assertRaisesRegex(RuntimeError, r"input 'labels'\[2\] = 99 is out of range"):
            s.step(bad, lr=LR)
        for k, v in s.parameters().items():
            np.testing.assert_array_equal(v, before[k], err_msg=k)
        s.step(self.batch(1), lr=LR)  # and training goes on


if __name__ == "__main__":
    unittest.main()
