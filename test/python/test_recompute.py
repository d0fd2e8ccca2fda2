# Recompute trades FLOPs for memory and never changes a number: on the CPU target, every
# sample (dropout in training mode, BatchNorm, attention, SGD with momentum and AdamW) trained
# with `--recompute selective`, `fused` (the default), `layers` and `budget=70%` gives bit for
# bit the losses and parameters of the same build without it (a recomputed dropout draws the
# same mask from its counter-based generator). selective must have recomputed something and shrunk the train
# step's arena (except on the MLP, whose arena peaks where no cheap value is live); layers must
# have found the GPT's and BERT's two layers, recomputed at least one (the last one's backward
# follows its forward: often nothing to gain) and shrunk the arena; a budget must hold or be refused
# with the smallest arena it could reach; fused must launch as many kernels as none and have
# shrunk the GPT's and BERT's arenas.
import json
import os
import re
import subprocess
import unittest

import numpy as np

from ortc_testlib import (ENV, ORTC, REPORT_SCHEMA, SAMPLES, TempDir, random_feed, run, sample_path,
                          schema_problems)

FLAGS = {"gpt2": ["--optimizer", "adamw"], "bert": ["--optimizer", "adamw"],
         "cnn": ["--momentum", "0.9", "--weight-decay", "0.01"], "mlp": ["--optimizer", "adamw"]}
STEPS = 4
SUMMARY = re.compile(r"recompute \((\S+)\) @train_step: (\d+) values, arena (\d+) bytes vs (\d+) without")
POLICIES = ("none", "selective", "fused", "layers", "budget=70%")


class RecomputeIsExact(unittest.TestCase):
    def check_report(self, path, policy, summary):
        """--report (as its schema says) gives the train step's arena and, under a policy, what
        recompute chose."""
        with open(path) as f:
            report = json.load(f)
        with open(REPORT_SCHEMA) as f:
            self.assertEqual(schema_problems(report, json.load(f)), [])
        step = report["kernels"]["functions"]["train_step"]
        self.assertGreater(step["arena_bytes"], 0)
        if policy == "none":
            self.assertNotIn("recompute", step)
            return
        r = step["recompute"]
        self.assertEqual(r["policy"], policy)
        values, arena, without = map(int, summary.groups()[1:])
        self.assertEqual((r["values"], step["arena_bytes"], r["arena_bytes_without"]),
                         (values, arena, without))
        self.assertEqual(len(r["nodes"]), values)
        self.assertGreater(r["forward_flops"], 0)
        self.assertEqual("budget_bytes" in r, policy.startswith("budget"))
        self.assertEqual("block_ops" in r, policy == "layers")

    def test_policies_train_the_same_bits(self):
        for sample in SAMPLES:
            with self.subTest(sample=sample), TempDir() as d:
                results, summaries, blocks, arenas, launches = {}, {}, {}, {}, {}
                for policy in POLICIES:
                    art = os.path.join(d, policy.replace("=", "-").replace("%", "pct") + ".ortc")
                    p = subprocess.run([ORTC, "build", sample_path(sample), "--dim", "batch=4", "-o", art,
                                        "--recompute", policy, "--report", art + ".json"] + FLAGS[sample],
                                       capture_output=True, text=True, env=ENV)
                    if policy.startswith("budget") and p.returncode == 1:
                        # Out of reach: the error names the smallest arena recompute reached.
                        self.assertIn("cannot fit the budget", p.stderr)
                        print("%-5s %s: %s" % (sample, policy, p.stderr.strip().splitlines()[-1]))
                        continue
                    self.assertEqual(p.returncode, 0, p.stderr)
                    summaries[policy] = SUMMARY.search(p.stderr)
                    with open(art + ".json") as f:
                        step = json.load(f)["kernels"]["functions"]["train_step"]
                        arenas[policy], launches[policy] = step["arena_bytes"], step["launches"]
                    self.check_report(art + ".json", policy, summaries[policy])
                    blocks[policy] = p.stderr
                    feed = os.path.join(d, "feed.npz")
                    if not os.path.exists(feed):
                        random_feed(art, feed, STEPS)
                    log, params = os.path.join(d, "run.jsonl"), os.path.join(d, "p.npz")
                    run([ORTC, "train", art, "--data", feed, "--steps", str(STEPS), "--lr", "0.01",
                         "--log-json", log, "--save-params", params, "--quiet"])
                    with open(log) as f:
                        losses = [json.loads(line)["loss"] for line in f]
                    os.remove(log)
                    results[policy] = (losses, dict(np.load(params)))
                for policy, m in summaries.items():
                    if policy == "none":
                        continue
                    self.assertIsNotNone(m, "%s: the build printed no recompute summary" % policy)
                    values, arena, without = map(int, m.groups()[1:])
                    # The "without" the pass planned on its trial copy is the none build's arena.
                    self.assertEqual(without, arenas["none"], policy)
                    print("%-5s %-10s recomputed %d values: arena %d -> %d bytes (%.0f%%)"
                          % (sample, policy, values, without, arena, 100.0 * (arena - without) / without))
                    if policy.startswith("budget"):
                        self.assertLessEqual(arena, 0.7 * without + 1)
                    elif policy == "fused":
                        # Its clones join kernels the step launches anyway.
                        self.assertEqual(launches[policy], launches["none"])
                        self.assertLessEqual(arena, without)
                        if sample in ("gpt2", "bert"):
                            self.assertGreater(values, 0)
                            self.assertLess(arena, without)
                    elif policy == "layers":
                        if sample in ("gpt2", "bert"):
                            self.assertRegex(blocks[policy], r", [12] of 2 repeated blocks")
                            self.assertLess(arena, without)
                    elif sample != "mlp":
                        # (The MLP's arena peaks where no cheap value is live: nothing to take.)
                        self.assertGreater(values, 0)
                        self.assertLess(arena, without)
                l0, p0 = results["none"]
                self.assertEqual(len(l0), STEPS)
                for policy, (l1, p1) in results.items():
                    self.assertEqual(l0, l1, policy)
                    self.assertEqual(sorted(p0), sorted(p1))
                    for name in p0:
                        np.testing.assert_array_equal(p0[name], p1[name], err_msg="%s: %s" % (policy, name))


if __name__ == "__main__":
    unittest.main()
