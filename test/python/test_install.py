# `cmake --install` (issue 22): the installed ortc builds and trains a sample with nothing
# of the build tree, and an application outside the tree finds the package
# (find_package(ortc)), links ortc::ortc_runtime and trains the artifact through the C
# API to the loss `ortc train` reports for the same feed.
import os
import subprocess
import unittest

import numpy as np

from ortc_testlib import BUILD, ENV, ROOT, TempDir, run, sample_path

STEPS = 3


class Install(unittest.TestCase):
    def test_install_and_link_the_runtime(self):
        with TempDir() as d:
            prefix = os.path.join(d, "prefix")
            run(["cmake", "--install", BUILD, "--prefix", prefix])
            for tool in ("ortc", "ortc-opt", "ortc-run"):
                self.assertTrue(os.access(os.path.join(prefix, "bin", tool), os.X_OK), tool)
            self.assertTrue(os.path.exists(os.path.join(prefix, "include", "ortc", "runtime.h")))
            ortc = os.path.join(prefix, "bin", "ortc")
            art = os.path.join(d, "m.ortc")
            run([ortc, "build", sample_path("mlp"), "--dim", "batch=4", "-o", art], cwd=d)
            feed = os.path.join(d, "zeros.npz")
            np.savez(feed, x=np.zeros((4, 32), np.float32), labels=np.zeros(4, np.int64))
            out = run([os.path.join(prefix, "bin", "ortc-run"), "train", art, "--data", feed,
                       "--steps", str(STEPS), "--lr", "0.1"]).stdout
            want = float(out.split("step %d loss " % STEPS)[1].split()[0])

            consumer = os.path.join(d, "consumer")
            env = dict(ENV, CMAKE_PREFIX_PATH=prefix)
            run(["cmake", "-S", os.path.join(ROOT, "test", "install", "consumer"), "-B", consumer,
                 "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release"], env=env)
            run(["cmake", "--build", consumer], env=env)
            got = float(run([os.path.join(consumer, "consumer"), art, str(STEPS)]).stdout)
            self.assertAlmostEqual(got, want, delta=1e-5 * abs(want))


if __name__ == "__main__":
    unittest.main()
