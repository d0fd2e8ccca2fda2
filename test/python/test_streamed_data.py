# Streamed feeds (issue 22): `--data` as a file, a folder of .npz shards (stored or
# compressed), a glob of shards or a folder of NAME.npy arrays trains identically;
# --epochs/--shuffle visit every batch once per epoch in a seeded order, and a run
# resumed mid-epoch from a checkpoint reads what the unbroken run read; a dataset more
# than 10x the process's peak memory (VmHWM, measured) trains with that peak flat.
import glob
import json
import os
import subprocess
import sys
import unittest

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ortc_testlib import ENV, ORTC, ORTC_RUN, TempDir, run

F, C, B = 64, 5, 4


def linear_model(path, features=F):
    w = numpy_helper.from_array((np.random.RandomState(0).randn(features, C) * 0.1).astype(np.float32), "w")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["logits"])], "linear",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [B, features])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [B, C])], [w])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)


def losses_of(log):
    with open(log) as f:
        return [r["loss"] for r in map(json.loads, f) if "loss" in r]


class StreamedData(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = TempDir()
        d = cls.d = cls.tmp.__enter__()
        linear_model(os.path.join(d, "m.onnx"))
        cls.art = os.path.join(d, "m.ortc")
        run([ORTC, "build", os.path.join(d, "m.onnx"), "-o", cls.art])
        rs = np.random.RandomState(1)
        cls.x = rs.randn(9, B, F)                      # float64: converted per batch
        cls.y = rs.randint(0, C, (9, B))
        np.savez(os.path.join(d, "all.npz"), x=cls.x, labels=cls.y)
        os.makedirs(os.path.join(d, "shards"))
        for name, lo, hi, save in (("a", 0, 2, np.savez), ("b", 2, 5, np.savez_compressed),
                                   ("c", 5, 9, np.savez)):
            save(os.path.join(d, "shards", name + ".npz"), x=cls.x[lo:hi], labels=cls.y[lo:hi])
        os.makedirs(os.path.join(d, "arrays"))
        np.save(os.path.join(d, "arrays", "x.npy"), cls.x.astype(np.float32))
        np.save(os.path.join(d, "arrays", "labels.npy"), cls.y)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.__exit__(None, None, None)

    def train(self, data, *flags, tool=ORTC):
        log = os.path.join(self.d, "log.jsonl")
        run([tool, "train", self.art, "--data", data, "--log-json", log, "--quiet"] + list(flags))
        return losses_of(log)

    def test_every_form_of_feed_trains_alike(self):
        flags = ("--steps", "12", "--lr", "0.05")
        want = self.train(os.path.join(self.d, "all.npz"), *flags)
        for data in ("shards", os.path.join("shards", "*.npz"), "arrays"):
            for tool in (ORTC, ORTC_RUN):
                self.assertEqual(self.train(os.path.join(self.d, data), *flags, tool=tool), want, data)

    def test_epochs_visit_each_batch_once_in_a_seeded_order(self):
        shards = os.path.join(self.d, "shards")
        per_batch = self.train(shards, "--steps", "9", "--lr", "0")   # lr 0: the loss names the batch
        self.assertEqual(len(set(per_batch)), 9)
        runs = {seed: self.train(shards, "--epochs", "2", "--shuffle", seed, "--lr", "0")
                for seed in ("5", "6")}
        for seed, losses in runs.items():
            self.assertEqual(len(losses), 18)
            orders = [[per_batch.index(v) for v in losses[e * 9:(e + 1) * 9]] for e in range(2)]
            for order in orders:
                self.assertEqual(sorted(order), list(range(9)), seed)
            self.assertNotEqual(orders[0], orders[1], "both epochs in one order")
            self.assertNotEqual(orders[0], list(range(9)), "not shuffled")
        self.assertNotEqual(runs["5"], runs["6"])
        self.assertEqual(self.train(shards, "--epochs", "2", "--shuffle", "5", "--lr", "0"), runs["5"])

    def test_resumed_mid_epoch_reads_what_the_unbroken_run_read(self):
        shards, ckpt = os.path.join(self.d, "shards"), os.path.join(self.d, "c.npz")
        whole = self.train(shards, "--epochs", "2", "--shuffle", "3", "--lr", "0.05")
        first = self.train(shards, "--steps", "7", "--shuffle", "3", "--lr", "0.05",
                           "--save-checkpoint", ckpt)
        rest = self.train(shards, "--epochs", "2", "--shuffle", "3", "--lr", "0.05",
                          "--load-checkpoint", ckpt)
        self.assertEqual(first + rest, whole)

    def test_bad_shards_are_named(self):
        bad = os.path.join(self.d, "bad")
        os.makedirs(bad, exist_ok=True)
        np.savez(os.path.join(bad, "a.npz"), x=self.x[:2], labels=self.y[:2])
        np.savez(os.path.join(bad, "b.npz"), x=self.x[:2])
        for data, needle in ((bad, "b.npz: no array for input 'labels'"),
                             (os.path.join(self.d, "nothing*.npz"), "nothing*.npz: no file matches")):
            p = subprocess.run([ORTC, "train", self.art, "--data", data], capture_output=True,
                               text=True, env=ENV)
            self.assertEqual(p.returncode, 1, p.stderr)
            self.assertIn(needle, p.stderr)
        np.savez(os.path.join(bad, "b.npz"), x=self.x[:2], labels=self.y[:3])
        p = subprocess.run([ORTC, "train", self.art, "--data", bad], capture_output=True, text=True, env=ENV)
        self.assertIn("b.npz: inputs 'x' and 'labels' hold different numbers of batches (2 and 3)",
                      p.stderr)


class FlatMemory(unittest.TestCase):
    """ortc-run's peak RSS over a 160 MB dataset of 32 shards is its peak over one 1 MB
    shard: the dataset is more than 10x the process's whole memory."""
    FEATURES = 8192  # 256 KB batches

    def peak_mb(self, art, data, steps):
        code = ("import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True, "
                "capture_output=True); print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
        out = run([sys.executable, "-c", code, ORTC_RUN, "train", art, "--data", data, "--steps",
                   str(steps), "--lr", "0.01", "--threads", "1"]).stdout
        return int(out) / 1024.0

    def test_peak_memory_is_flat(self):
        with TempDir() as d:
            linear_model(os.path.join(d, "m.onnx"), self.FEATURES)
            art = os.path.join(d, "m.ortc")
            run([ORTC, "build", os.path.join(d, "m.onnx"), "-o", art])
            rs = np.random.RandomState(2)
            os.makedirs(os.path.join(d, "big"))
            for s in range(32):
                np.savez(os.path.join(d, "big", "s%02d.npz" % s),
                         x=rs.randn(40, B, self.FEATURES).astype(np.float32),
                         labels=rs.randint(0, C, (40, B)))
            np.savez(os.path.join(d, "small.npz"), x=rs.randn(4, B, self.FEATURES).astype(np.float32),
                     labels=rs.randint(0, C, (4, B)))
            dataset_mb = sum(os.path.getsize(f) for f in glob.glob(os.path.join(d, "big", "*"))) / 2**20
            small = self.peak_mb(art, os.path.join(d, "small.npz"), 4)
            big = self.peak_mb(art, os.path.join(d, "big"), 32 * 40)
            print("peak RSS: %.1f MB over a 1 MB feed, %.1f MB over %.0f MB of shards"
                  % (small, big, dataset_mb))
            self.assertGreater(dataset_mb, 10 * big)
            self.assertLess(big, small + 4.0)


if __name__ == "__main__":
    unittest.main()
