# Streamed feeds (issue 22): `--data` as a file, a folder of .npz shards (stored or
# compressed), a glob of shards or a folder of NAME.npy arrays trains identically;
# --epochs/--shuffle visit every batch once per epoch in a seeded order, and a run
# resumed mid-epoch from a checkpoint reads what the unbroken run read; a dataset more
# than 10x a memory cap set on the process (RLIMIT_DATA) trains under it, with the peak RSS
# (VmHWM, measured) of a 1 MB feed, from shards and from memory-mapped .npy arrays.
import glob
import os
import subprocess
import sys
import unittest

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ortc_testlib import ENV, ORTC, ORTC_RUN, TempDir, log_losses, run

F, C, B = 64, 5, 4


def linear_model(path, features=F):
    w = numpy_helper.from_array((np.random.RandomState(0).randn(features, C) * 0.1).astype(np.float32), "w")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["logits"])], "linear",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [B, features])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [B, C])], [w])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)


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
        return log_losses(log)

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
    """ortc-run trains a dataset more than 10x larger than a memory cap set on the process
    (RLIMIT_DATA: its heap and anonymous memory, where a loader that held the data would keep
    it; the cap is the smallest that one 1 MB feed trains under), from .npz shards and from
    memory-mapped .npy arrays, with the peak RSS it has over that 1 MB feed."""
    FEATURES = 8192  # 128 KB batches
    CAPS_MB = (16, 24, 32, 48, 64, 96)

    def train(self, art, data, steps, cap_mb):
        """(exit status, peak RSS in MB) of ortc-run trained under the cap."""
        code = ("import resource, subprocess, sys\n"
                "cap = int(float(sys.argv[1]) * 2**20)\n"
                "def limit():\n"
                "    resource.setrlimit(resource.RLIMIT_DATA, (cap, cap))\n"
                "p = subprocess.run(sys.argv[2:], preexec_fn=limit, capture_output=True)\n"
                "print(p.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
        out = run([sys.executable, "-c", code, str(cap_mb), ORTC_RUN, "train", art, "--data", data,
                   "--steps", str(steps), "--lr", "0.01", "--threads", "1", "--quiet"]).stdout.split()
        return int(out[0]), int(out[1]) / 1024.0

    def test_peak_memory_is_flat_under_a_cap(self):
        with TempDir() as d:
            linear_model(os.path.join(d, "m.onnx"), self.FEATURES)
            art = os.path.join(d, "m.ortc")
            run([ORTC, "build", os.path.join(d, "m.onnx"), "-o", art])
            rs = np.random.RandomState(2)
            np.savez(os.path.join(d, "small.npz"), x=rs.randn(4, B, self.FEATURES).astype(np.float32),
                     labels=rs.randint(0, C, (4, B)))
            cap = small = None
            for mb in self.CAPS_MB:
                rc, peak = self.train(art, os.path.join(d, "small.npz"), 4, mb)
                if rc == 0:
                    cap, small = mb, peak
                    break
            self.assertIsNotNone(cap, "one 1 MB feed does not train under %d MB" % self.CAPS_MB[-1])
            per_shard, batch_mb = 40, B * self.FEATURES * 4 / 2**20
            shards = int(10.5 * cap / (per_shard * batch_mb)) + 1
            steps = shards * per_shard
            for name in ("big", "arrays"):
                os.makedirs(os.path.join(d, name))
            x = np.lib.format.open_memmap(os.path.join(d, "arrays", "x.npy"), mode="w+",
                                          dtype=np.float32, shape=(steps, B, self.FEATURES))
            labels = rs.randint(0, C, (steps, B))
            for i in range(shards):
                part = rs.randn(per_shard, B, self.FEATURES).astype(np.float32)
                x[i * per_shard:(i + 1) * per_shard] = part
                np.savez(os.path.join(d, "big", "s%03d.npz" % i), x=part,
                         labels=labels[i * per_shard:(i + 1) * per_shard])
            x.flush()
            del x
            np.save(os.path.join(d, "arrays", "labels.npy"), labels)
            for name in ("big", "arrays"):
                folder = os.path.join(d, name)
                dataset_mb = sum(os.path.getsize(f) for f in glob.glob(os.path.join(folder, "*"))) / 2**20
                rc, big = self.train(art, folder, steps, cap)
                _, quarter = self.train(art, folder, steps // 4, cap)
                print("%s: %.0f MB trained under a %d MB cap; peak RSS %.1f MB (a quarter of it: %.1f MB, "
                      "a 1 MB feed: %.1f MB)" % (name, dataset_mb, cap, big, quarter, small))
                self.assertEqual(rc, 0, "%s under a %d MB cap" % (name, cap))
                self.assertGreater(dataset_mb, 10 * cap)
                self.assertLess(big, small + (4.0 if name == "big" else 8.0), name)
                if name == "big":  # flat: four times the data, the same peak
                    self.assertLess(big, quarter + 1.0, name)
                # A mapped array's pages come and go with the page cache's folios (a fault maps
                # a whole large folio, up to 2 MB, and a batch can straddle two): its resident
                # file pages peak a few MB above the 1 MB .npz feed's whatever the array's size,
                # while the cap bounds the process's own memory.


if __name__ == "__main__":
    unittest.main()
