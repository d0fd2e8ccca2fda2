# Data-parallel training on the CPU target (ortc build --data-parallel, started by
# mpirun -np 2 on loopback): two ranks, each on its half of every batch, must train what
# one process trains on the whole batch. Both runs are judged against PyTorch's float64
# run of the whole batch (ortc_testlib.check_oracle), as every ortc-vs-ortc comparison is.
# Skips where Open MPI (mpirun, and the communicator plugin built with it) is missing.
import json
import os
import shutil
import subprocess
import sys
import unittest

import numpy as np

import ortc_testlib
from ortc_testlib import (BUILD, ENV, MPI_ENV, ORTC, ORTC_RUN, ROOT, TempDir, check_oracle,
                          reference, run, updates_vs_reference, without_dropout)

RANKS = 2
STEPS = 5
PLUGIN = os.path.join(BUILD, "runtime", "libortc_comm_mpi.so")
def mpirun(args, check=True):
    return ortc_testlib.mpirun(RANKS, args, check)


def split_steps(ref, ranks):
    """The reference's per-step batches (steps/<input> [S, B, ...]) as a feed of S * ranks
    batches of B / ranks: batch s * ranks + r is rank r's share of step s."""
    feed = {}
    for key, v in ref.items():
        if key.startswith("steps/"):
            s, b = v.shape[:2]
            feed[key[len("steps/"):]] = v.reshape((s * ranks, b // ranks) + v.shape[2:])
    return feed


def state_bytes(artifact, exclude=()):
    """Bytes of the optimizer state of an artifact (its manifest's "state" tensors)."""
    with open(os.path.join(artifact, "manifest.json")) as f:
        m = json.load(f)
    size = {"f32": 4, "f64": 8, "i64": 8}
    return sum(int(np.prod(t["shape"])) * size[t["dtype"]] for t in m["tensors"]
               if t["role"] == "state" and t["name"] not in exclude)


def whole_steps(ref):
    return {k[len("steps/"):]: v for k, v in ref.items() if k.startswith("steps/")}


@unittest.skipUnless(shutil.which("mpirun") and os.path.exists(PLUGIN),
                     "needs Open MPI (mpirun and runtime/libortc_comm_mpi.so)")
class DataParallel(unittest.TestCase):
    def judge(self, what, log, params, ref, ref32, adamw):
        trained = dict(np.load(params))
        upd, upd64, upd32 = updates_vs_reference(ref, ref32, trained, adamw)
        self.assertGreater(len(upd), 0)
        failures, worst = check_oracle(ortc_testlib.log_losses(log), ref["losses"], ref32["losses"], upd, upd64,
                                       upd32, what)
        print("%s: worst loss err %.1e (torch f32 %.1e), update err %.1e (torch f32 %.1e)"
              % (what, worst["loss"], worst["loss32"], worst["update"], worst["update32"]))
        self.assertFalse(failures, "\n".join(failures))
        return trained

    def test_gpt2_two_ranks_train_the_whole_batch(self):
        lr, batch = 0.004, 4
        opt = ["--optimizer", "adamw", "--weight-decay", "0.01"]
        with TempDir() as d:
            common = ("--steps", str(STEPS), "--lr", str(lr), "--no-dropout", "--batches-per-step",
                      "--batch", str(batch), *opt)
            ref = reference("gpt2", d, "--dtype", "float64", *common)
            ref32 = reference("gpt2", d, "--dtype", "float32", *common)
            model = without_dropout("gpt2", d)
            one, dp = os.path.join(d, "one.ortc"), os.path.join(d, "dp.ortc")
            zero = os.path.join(d, "zero.ortc")
            run([ORTC, "build", model, "-o", one, "--dim", "batch=%d" % batch] + opt)
            # Small buckets: the gradients travel in several all-reduces.
            run([ORTC, "build", model, "-o", dp, "--dim", "batch=%d" % (batch // RANKS),
                 "--data-parallel", "--bucket-mb", "0.02"] + opt)
            run([ORTC, "build", model, "-o", zero, "--dim", "batch=%d" % (batch // RANKS),
                 "--data-parallel", "--zero", "1", "--ranks", str(RANKS)] + opt)
            # ZeRO-1: each rank holds 1/RANKS of the optimizer state (AdamW's moments; the
            # step counter is one number).
            moments = {a: state_bytes(a, exclude=("step",)) for a in (dp, zero)}
            self.assertAlmostEqual(moments[zero] * RANKS / moments[dp], 1.0, delta=0.01, msg=moments)
            with open(os.path.join(dp, "manifest.json")) as f:
                m = json.load(f)
            self.assertEqual(m["data_parallel"], {"communicator": "mpi"})
            self.assertGreater(m["functions"]["train_step"]["collectives"]["calls"], 2)
            np.savez(os.path.join(d, "whole.npz"), **whole_steps(ref))
            np.savez(os.path.join(d, "halves.npz"), **split_steps(ref, RANKS))
            # One feed per rank ({rank} in --data) reads what the rank-strided feed gives it.
            halves = split_steps(ref, RANKS)
            for r in range(RANKS):
                np.savez(os.path.join(d, "rank%d.npz" % r), **{k: v[r::RANKS] for k, v in halves.items()})
            for art, feed, launch in ((one, "whole.npz", run), (dp, "halves.npz", mpirun),
                                      (zero, "halves.npz", mpirun), (dp, "rank{rank}.npz", mpirun)):
                log, params = os.path.join(d, "log.jsonl"), os.path.join(d, "p.npz")
                p = launch([ORTC_RUN, "train", art, "--data", os.path.join(d, feed), "--steps",
                            str(STEPS), "--lr", str(lr), "--log-json", log, "--save-params", params,
                            "--threads", "1"])
                if launch is mpirun: # one rank speaks: its loss is the mean over the ranks
                    self.assertEqual(p.stdout.count("step 1 loss"), 1, p.stdout)
                self.judge("gpt2 " + os.path.basename(art), log, params, ref, ref32, True)

    def test_cnn_matches_pytorch_ddp(self):
        """The CNN sample (BatchNorm: each rank normalises with its own half's statistics, as
        DDP without SyncBatchNorm) against PyTorch DDP over two gloo processes on the same
        split (samples/ddp_reference.py), rank 0's running statistics included."""
        lr = 0.05
        with TempDir() as d:
            ref = reference("cnn", d, "--dtype", "float64", "--steps", str(STEPS), "--lr", str(lr),
                            "--no-dropout", "--batches-per-step", "--batch", "4")
            ddp = {}
            for dtype in ("float64", "float32"):
                out = os.path.join(d, "ddp_%s.npz" % dtype)
                run([sys.executable, os.path.join(ROOT, "samples", "ddp_reference.py"), "cnn", out,
                     "--ranks", str(RANKS), "--dtype", dtype, "--steps", str(STEPS), "--lr", str(lr),
                     "--batch", "4", "--port", str(29500 + os.getpid() % 500)])
                ddp[dtype] = dict(np.load(out))
                # Which gradients are rounding noise only: the whole batch's, from reference.py.
                ddp[dtype].update((k, v) for k, v in ref.items() if k.startswith("grad/"))
            art = os.path.join(d, "dp.ortc")
            run([ORTC, "build", without_dropout("cnn", d), "-o", art, "--dim", "batch=2",
                 "--data-parallel"])
            feed, log, params = (os.path.join(d, f) for f in ("halves.npz", "log.jsonl", "p.npz"))
            np.savez(feed, **split_steps(ref, RANKS))
            mpirun([ORTC_RUN, "train", art, "--data", feed, "--steps", str(STEPS), "--lr", str(lr),
                    "--log-json", log, "--save-params", params, "--threads", "1"])
            trained = self.judge("cnn, 2 ranks vs DDP", log, params, ddp["float64"], ddp["float32"],
                                 False)
            self.assertTrue(any(k.endswith("running_mean") for k in trained))

    def test_cnn_sync_batchnorm_trains_the_whole_batch(self):
        """--sync-batchnorm: BatchNorm over both ranks' halves, so 2 ranks train what one
        process trains on the whole batch (PyTorch float64's run of it is the oracle), the
        running statistics (unbiased over the global count) included."""
        lr = 0.05
        with TempDir() as d:
            common = ("--steps", str(STEPS), "--lr", str(lr), "--no-dropout", "--batches-per-step",
                      "--batch", "4")
            ref = reference("cnn", d, "--dtype", "float64", *common)
            ref32 = reference("cnn", d, "--dtype", "float32", *common)
            art = os.path.join(d, "sync.ortc")
            run([ORTC, "build", without_dropout("cnn", d), "-o", art, "--dim", "batch=2",
                 "--data-parallel", "--sync-batchnorm"])
            feed, log, params = (os.path.join(d, f) for f in ("halves.npz", "log.jsonl", "p.npz"))
            np.savez(feed, **split_steps(ref, RANKS))
            mpirun([ORTC_RUN, "train", art, "--data", feed, "--steps", str(STEPS), "--lr", str(lr),
                    "--log-json", log, "--save-params", params, "--threads", "1"])
            trained = self.judge("cnn --sync-batchnorm, 2 ranks vs 1 process", log, params, ref,
                                 ref32, False)
            self.assertTrue(any(k.endswith("running_var") for k in trained))

    def test_nonfinite_on_one_rank_skips_or_stops_every_rank(self):
        """Rank 1's batch of step 2 holds an inf: the all-reduced gradients are not finite on
        both ranks, so both skip the step (and train on as one process does on the whole
        batch) or both stop with the same message."""
        with TempDir() as d:
            model = without_dropout("mlp", d)
            one, dp = os.path.join(d, "one.ortc"), os.path.join(d, "dp.ortc")
            run([ORTC, "build", model, "-o", one, "--dim", "batch=4"])
            run([ORTC, "build", model, "-o", dp, "--dim", "batch=2", "--data-parallel"])
            ref = reference("mlp", d, "--dtype", "float64", "--steps", str(STEPS),
                            "--batches-per-step", "--batch", "4")
            whole = {k: v.copy() for k, v in whole_steps(ref).items()}
            x = next(k for k, v in whole.items() if v.dtype.kind == "f")
            whole[x][1, 4 // RANKS].flat[0] = np.inf  # step 2, the first row of rank 1's half
            halves = split_steps({"steps/" + k: v for k, v in whole.items()}, RANKS)
            np.savez(os.path.join(d, "whole.npz"), **whole)
            np.savez(os.path.join(d, "halves.npz"), **halves)
            got = {}
            for art, feed, launch in ((one, "whole.npz", run), (dp, "halves.npz", mpirun)):
                log, params = os.path.join(d, "log.jsonl"), os.path.join(d, "p.npz")
                launch([ORTC_RUN, "train", art, "--data", os.path.join(d, feed), "--steps",
                        str(STEPS), "--lr", "0.05", "--log-json", log, "--save-params", params,
                        "--on-nonfinite", "skip", "--threads", "1"])
                with open(log) as f:
                    got[art] = ([r["finite"] for r in map(json.loads, f)], dict(np.load(params)))
            self.assertEqual(got[dp][0], [True, False, True, True, True])
            self.assertEqual(got[one][0], got[dp][0])
            for k, v in got[one][1].items():
                np.testing.assert_allclose(got[dp][1][k], v, rtol=1e-4, atol=1e-6, err_msg=k)

            p = mpirun([ORTC_RUN, "train", dp, "--data", os.path.join(d, "halves.npz"), "--steps",
                        str(STEPS), "--threads", "1"], check=False)
            self.assertNotEqual(p.returncode, 0)
            errors = [l for l in p.stderr.splitlines() if l.startswith("ortc-run: error:")]
            self.assertEqual(len(errors), RANKS, p.stderr)
            self.assertEqual(len(set(errors)), 1, errors)
            self.assertIn("step 2: not finite", errors[0])

    def test_zero_checkpoint_resumes_exactly(self):
        """A ZeRO run writes one checkpoint per rank (each holds its own state shard); 2 + 2
        steps through it train exactly what 4 steps do. A missing rank's file is named."""
        with TempDir() as d:
            model = without_dropout("gpt2", d)
            art = os.path.join(d, "zero.ortc")
            run([ORTC, "build", model, "-o", art, "--dim", "batch=2", "--data-parallel", "--zero",
                 "1", "--ranks", str(RANKS), "--optimizer", "adamw"])
            ref = reference("gpt2", d, "--dtype", "float64", "--steps", "4", "--batches-per-step",
                            "--batch", "4")
            feed = os.path.join(d, "halves.npz")
            np.savez(feed, **split_steps(ref, RANKS))
            common = [ORTC_RUN, "train", art, "--data", feed, "--lr", "0.01", "--threads", "1"]
            mpirun(common + ["--steps", "4", "--save-params", os.path.join(d, "straight.npz")])
            ck = os.path.join(d, "ck.npz")
            mpirun(common + ["--steps", "2", "--save-checkpoint", ck])
            self.assertTrue(os.path.exists(os.path.join(d, "ck.rank1.npz")))
            shards = [dict(np.load(f)) for f in (ck, os.path.join(d, "ck.rank1.npz"))]
            self.assertFalse(np.array_equal(shards[0]["zero1.exp_avg"], shards[1]["zero1.exp_avg"]))
            mpirun(common + ["--steps", "2", "--load-checkpoint", ck, "--save-params",
                             os.path.join(d, "resumed.npz")])
            straight, resumed = np.load(os.path.join(d, "straight.npz")), np.load(os.path.join(d, "resumed.npz"))
            for k in straight.files:
                np.testing.assert_array_equal(resumed[k], straight[k], err_msg=k)
            os.remove(os.path.join(d, "ck.rank1.npz"))
            p = mpirun(common + ["--steps", "1", "--load-checkpoint", ck], check=False)
            self.assertNotEqual(p.returncode, 0)
            self.assertIn("ck.rank1.npz: cannot open", p.stderr)
            self.assertIn("a --zero 1 checkpoint is one file per rank", p.stderr)
            # Built for 2 ranks, started alone: refused before any step.
            p = subprocess.run(common + ["--steps", "1"], capture_output=True, text=True, env=ENV)
            self.assertEqual(p.returncode, 1)
            self.assertIn("built with --zero 1 for 2 ranks", p.stderr)

    def test_alone_and_without_the_plugin(self):
        """A data-parallel artifact started alone is a world of one (its all-reduces copy);
        under mpirun without the plugin, every rank says what is missing, and nothing hangs."""
        with TempDir() as d:
            model = without_dropout("mlp", d)
            art = os.path.join(d, "dp.ortc")
            run([ORTC, "build", model, "-o", art, "--dim", "batch=2", "--data-parallel"])
            ref = reference("mlp", d, "--dtype", "float64", "--steps", "2", "--batches-per-step",
                            "--batch", "2")
            np.savez(os.path.join(d, "feed.npz"), **whole_steps(ref))
            p = run([ORTC_RUN, "train", art, "--data", os.path.join(d, "feed.npz"), "--steps", "2"])
            self.assertIn("step 2 loss", p.stdout)
            nowhere = os.path.join(d, "nowhere", "libortc_comm_mpi.so")
            p = ortc_testlib.mpirun(RANKS, [ORTC_RUN, "train", art, "--data",
                                            os.path.join(d, "feed.npz"), "--steps", "1"],
                                    check=False, env=dict(MPI_ENV, ORTC_COMM_MPI=nowhere))
            self.assertNotEqual(p.returncode, 0)
            self.assertIn("is not installed (looked in %s" % nowhere, p.stderr)
            # torchrun-style variables start GPU targets only: the CPU target says how to start it.
            rank0 = dict(ENV, RANK="0", WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT="29500")
            p = subprocess.run([ORTC_RUN, "train", art, "--data", os.path.join(d, "feed.npz"),
                                "--steps", "1"], capture_output=True, text=True, env=rank0, timeout=60)
            self.assertEqual(p.returncode, 1, p.stderr)
            self.assertIn("the CPU target's collectives run on MPI: start its ranks with mpirun",
                          p.stderr)


if __name__ == "__main__":
    unittest.main()
