# `cmake --install` (issue 22): the installed ortc builds and trains a sample with nothing
# of the build tree, and an application outside the tree finds the package
# (find_package(ortc)), links ortc::ortc_runtime and trains the artifact through the C
# API to the loss `ortc train` reports for the same feed.
import os
import shutil
import unittest

import numpy as np

from ortc_testlib import BUILD, ENV, ROOT, TempDir, mpirun, run, sample_path

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
            # The MPI communicator is installed where the installed runtime finds it: a
            # data-parallel artifact trains on 2 ranks.
            plugins = [os.path.join(r, f) for r, _, fs in os.walk(prefix) for f in fs
                       if f == "libortc_comm_mpi.so"]
            if shutil.which("mpirun") and os.path.exists(os.path.join(BUILD, "runtime", "libortc_comm_mpi.so")):
                self.assertEqual(len(plugins), 1, plugins)
                self.assertEqual(os.path.basename(os.path.dirname(plugins[0])), "ortc")
                dp = os.path.join(d, "dp.ortc")
                run([ortc, "build", sample_path("mlp"), "--dim", "batch=2", "-o", dp,
                     "--data-parallel"], cwd=d)
                np.savez(os.path.join(d, "two.npz"), x=np.zeros((2, 2, 32), np.float32),
                         labels=np.zeros((2, 2), np.int64))
                p = mpirun(2, [os.path.join(prefix, "bin", "ortc-run"), "train", dp, "--data",
                               os.path.join(d, "two.npz"), "--steps", "2"])
                self.assertEqual(p.stdout.count("step 2 loss"), 1, p.stdout)

            consumer = os.path.join(d, "consumer")
            env = dict(ENV, CMAKE_PREFIX_PATH=prefix)
            run(["cmake", "-S", os.path.join(ROOT, "test", "install", "consumer"), "-B", consumer,
                 "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release"], env=env)
            run(["cmake", "--build", consumer], env=env)
            got = float(run([os.path.join(consumer, "consumer"), art, str(STEPS)]).stdout)
            self.assertAlmostEqual(got, want, delta=1e-5 * abs(want))


if __name__ == "__main__":
    unittest.main()
