# Why: a build or a training run can die at any moment (a CI job cancelled, an OOM kill,
# a laptop lid). Whatever ortc was writing must then be either complete and valid or
# absent under its final name, never half-written (issue: hardening). This kills the
# process group of `ortc build` (cold and warm kernel cache) and of `ortc-run train
# --save-params --save-checkpoint` with SIGKILL at seeded random moments, 100 kills in
# all, and checks every output after each kill: an artifact must load and train a step,
# a parameter or checkpoint file must hold every tensor of an unkilled run's file with
# its shape.
import os
import random
import shutil
import signal
import subprocess
import time
import unittest

import numpy as np

from ortc_testlib import ENV, ORTC, ORTC_RUN, TempDir, run, sample_path

SEED = 20261127


def timed(cmd, env):
    t0 = time.monotonic()
    run(cmd, env=env)
    return time.monotonic() - t0


def kill_at(cmd, env, delay):
    """Starts `cmd` in a process group of its own and SIGKILLs the group (ortc and the
    compilers it started, as a cancelled CI job is) after `delay` seconds."""
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True)
    try:
        p.wait(timeout=delay)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
    return p.returncode


def npz_layout(path):
    with np.load(path) as z:
        return {k: z[k].shape for k in z.files}


class RandomKill(unittest.TestCase):
    def test_outputs_complete_or_absent(self):
        rng = random.Random(SEED)
        kills = 0
        with TempDir() as work:
            feed = os.path.join(work, "feed.npz")
            np.savez(feed, x=np.zeros((2, 32), np.float32), labels=np.zeros(2, np.int64))
            warm = dict(ENV, ORTC_KERNEL_CACHE=os.path.join(work, "warm-cache"))
            out = os.path.join(work, "m.ortc")
            build = [ORTC, "build", sample_path("mlp"), "--dim", "batch=2", "--optimizer", "adamw",
                     "-o", out]
            t_warm = timed(build, warm)
            ref = os.path.join(work, "ref.ortc")
            shutil.copytree(out, ref)

            def check_artifact():
                if not os.path.exists(out):
                    return
                self.assertTrue(os.path.exists(os.path.join(out, "manifest.json")), os.listdir(out))
                run([ORTC_RUN, "train", out, "--data", feed, "--steps", "1", "--quiet"])

            # ortc build: with the warm cache (the artifact is copied) and, every third,
            # with an empty one (compiling; the kills land in the compile).
            for i in range(50):
                shutil.rmtree(out, ignore_errors=True)
                cold = i % 3 == 2
                env = dict(ENV, ORTC_KERNEL_CACHE=os.path.join(work, "cold-%d" % i)) if cold else warm
                limit = (5.0 if cold else 1.5) * max(t_warm, 0.2)
                kill_at(build, env, rng.uniform(0, limit))
                kills += 1
                check_artifact()
                shutil.rmtree(os.path.join(work, "cold-%d" % i), ignore_errors=True)

            # ortc-run train writing parameters and a checkpoint at the end.
            params, ckpt = os.path.join(work, "p.npz"), os.path.join(work, "c.npz")
            train = [ORTC_RUN, "train", ref, "--data", feed, "--steps", "2", "--quiet",
                     "--save-params", params, "--save-checkpoint", ckpt]
            t_train = timed(train, ENV)
            want_params, want_ckpt = npz_layout(params), npz_layout(ckpt)
            for _ in range(50):
                for f in (params, ckpt):
                    if os.path.exists(f):
                        os.remove(f)
                kill_at(train, ENV, rng.uniform(0, 1.3 * t_train))
                kills += 1
                for f, want in ((params, want_params), (ckpt, want_ckpt)):
                    if os.path.exists(f):
                        self.assertEqual(npz_layout(f), want, f)
            self.assertGreaterEqual(kills, 100)


if __name__ == "__main__":
    unittest.main()
