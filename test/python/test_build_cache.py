# Why: `ortc build` compiles each distinct kernel once, in units compiled in parallel
# and cached by source hash (issue: build time at real size). These checks hold the
# contract of that cache and of the deduplicated step program, through `--report`:
# a cold build compiles every unit; a rebuild copies the whole artifact; a model
# that differs in a few kernels recompiles only their units; two builds racing into
# one cache both succeed; the size bound evicts least recently used entries; -j1
# and -j2, cold and cached, give byte-identical artifacts; and a shared kernel is
# launched with each node's own addresses (the deduplicated artifact trains exactly
# as the lit tests' checked source says). The report follows schemas/build-report.schema.json.
import filecmp
import json
import os
import subprocess
import unittest

from ortc_testlib import ENV, ORTC, REPORT_SCHEMA, TempDir, sample_path, schema_problems


def build(work, tag, cache, sample="gpt2", extra=(), jobs=2, env=None):
    out = os.path.join(work, tag + ".ortc")
    report = os.path.join(work, tag + ".json")
    env = dict(env or ENV, ORTC_KERNEL_CACHE=cache)
    # --recompute none: the two layers then have the same kernels (the default recomputes in
    # the first layer what the last one, whose backward follows its forward, keeps).
    p = subprocess.run([ORTC, "build", sample_path(sample), "--dim", "batch=2", "--optimizer", "adamw",
                        "--recompute", "none",
                        "-o", out, "--report", report, "-j", str(jobs)] + list(extra),
                       capture_output=True, text=True, env=env)
    if p.returncode != 0:
        raise AssertionError(p.stderr)
    with open(report) as f:
        return out, json.load(f)


def entries(cache):
    """Cache entries (artifact folders and unit objects) -> size in bytes."""
    out = {}
    for name in os.listdir(cache):
        path = os.path.join(cache, name)
        if name == "units":
            for u in os.listdir(path):
                out["units/" + u] = os.path.getsize(os.path.join(path, u))
        else:
            out[name] = sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path))
    return out


def same_tree(a, b):
    names = sorted(os.listdir(a))
    if names != sorted(os.listdir(b)):
        return False
    match, mismatch, errors = filecmp.cmpfiles(a, b, names, shallow=False)
    return not mismatch and not errors


class StaleBuilds(unittest.TestCase):
    def test_build_sweeps_what_killed_builds_left(self):
        """A build removes `<out>.tmp.<pid>` / `<out>.old.<pid>` folders of dead processes
        next to its output, and keeps those of live ones and of other outputs."""
        with TempDir() as d:
            p = subprocess.Popen(["true"])
            p.wait()
            dead, alive = str(p.pid), str(os.getpid())
            out = os.path.join(d, "m.ortc")
            names = {"m.ortc.tmp." + dead: False, "m.ortc.old." + dead: False,
                     "m.ortc.tmp." + alive: True, "other.ortc.tmp." + dead: True}
            for n in names:
                os.makedirs(os.path.join(d, n, "sub"))
            p = subprocess.run([ORTC, "build", sample_path("mlp"), "--dim", "batch=2", "-o", out],
                               capture_output=True, text=True, env=ENV)
            self.assertEqual(p.returncode, 0, p.stderr)
            for n, kept in names.items():
                self.assertEqual(os.path.exists(os.path.join(d, n)), kept, n)
            self.assertTrue(os.path.exists(os.path.join(out, "manifest.json")))


class BuildCache(unittest.TestCase):
    def test_cold_warm_and_partial(self):
        with TempDir() as work:
            cache = os.path.join(work, "cache")
            cold_dir, cold = build(work, "cold", cache)
            with open(REPORT_SCHEMA) as f:
                schema = json.load(f)
            self.assertEqual(schema_problems(cold, schema), [])
            self.assertTrue(schema_problems(dict(cold, kernels={"launches": -1}), schema))
            units = cold["compile"]["units"]
            self.assertGreater(len(units), 1, "the CPU source is split into units")
            self.assertEqual(cold["compile"]["unit_cache_hits"], 0)
            self.assertFalse(cold["compile"]["artifact_cached"])
            k = cold["kernels"]
            self.assertLess(k["distinct"], k["launches"] / 2,
                            "the two layers and both steps share their kernels")

            warm_dir, warm = build(work, "warm", cache)
            self.assertTrue(warm["compile"]["artifact_cached"])
            self.assertTrue(same_tree(cold_dir, warm_dir))

            # AdamW's weight decay is a run-time scalar: another default is no new kernel.
            decay_dir, decay = build(work, "decay", cache, extra=["--weight-decay", "0.05"])
            self.assertTrue(decay["compile"]["artifact_cached"])
            with open(os.path.join(decay_dir, "manifest.json")) as f:
                defaults = {t["name"]: t.get("default") for t in json.load(f)["tensors"]}
            self.assertEqual(defaults["weight_decay"], 0.05)

            # Label smoothing changes the loss kernels only: their units recompile.
            _, part = build(work, "part", cache, extra=["--label-smoothing", "0.1"])
            hits = part["compile"]["unit_cache_hits"]
            self.assertFalse(part["compile"]["artifact_cached"])
            self.assertGreater(hits, 0)
            self.assertLess(hits, len(part["compile"]["units"]))

    def test_library_object_prebuilt_or_compiled_once(self):
        # The kernel library's float instantiations: ortc's prebuilt copy for its own
        # compiler and default flags; compiled once into the cache for other flags.
        with TempDir() as work:
            cache = os.path.join(work, "cache")
            env = {k: v for k, v in ENV.items() if k not in ("ORTC_CXX_OPT", "CXX")}
            _, default = build(work, "default", cache, env=env)
            lib = default["compile"]["units"][-1]
            self.assertEqual(lib["source"], "ortc_kernels_lib.o")
            self.assertTrue(lib["prebuilt"], lib)
            self.assertEqual(lib["compile_ms"], 0)
            out, first = build(work, "o1", cache)  # ORTC_CXX_OPT=-O1: not prebuilt
            lib = first["compile"]["units"][-1]
            self.assertFalse(lib["prebuilt"] or lib["cached"], lib)
            self.assertGreater(lib["compile_ms"], 0)
            self.assertTrue(os.path.exists(os.path.join(out, "ortc_kernels_lib.cpp")))
            _, second = build(work, "o1-mlp", cache, sample="mlp")
            self.assertTrue(second["compile"]["units"][-1]["cached"])

    def test_jobs_and_cache_give_identical_artifacts(self):
        with TempDir() as work:
            one, _ = build(work, "j1", os.path.join(work, "c1"), jobs=1)
            two, _ = build(work, "j2", os.path.join(work, "c2"), jobs=2)
            again, r = build(work, "j2-cached", os.path.join(work, "c1"), jobs=2)
            self.assertTrue(r["compile"]["artifact_cached"])
            self.assertTrue(same_tree(one, two))
            self.assertTrue(same_tree(one, again))

    def test_concurrent_builds_share_a_cache(self):
        with TempDir() as work:
            cache = os.path.join(work, "cache")
            env = dict(ENV, ORTC_KERNEL_CACHE=cache)
            procs = [subprocess.Popen([ORTC, "build", sample_path("gpt2"), "--dim", "batch=2",
                                       "-o", os.path.join(work, "m%d.ortc" % i)],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
                     for i in range(2)]
            for p in procs:
                _, err = p.communicate()
                self.assertEqual(p.returncode, 0, err)
            self.assertTrue(same_tree(os.path.join(work, "m0.ortc"), os.path.join(work, "m1.ortc")))
            self.assertFalse([e for e in os.listdir(cache) if ".tmp." in e])
            self.assertFalse([e for e in os.listdir(os.path.join(cache, "units")) if ".tmp." in e])

    def test_size_bound_evicts_least_recently_used(self):
        with TempDir() as work:
            cache = os.path.join(work, "cache")
            build(work, "mlp", cache, sample="mlp")
            old = entries(cache)
            build(work, "gpt", cache)
            new = {k: v for k, v in entries(cache).items() if k not in old}
            self.assertTrue(new)
            # Using the gpt2 artifact again refreshes it; a bound that fits only its
            # entries evicts the older mlp ones and keeps the gpt2 ones.
            bound_mb = (sum(new.values()) + 1024) / 2**20
            env_build = dict(ENV, ORTC_KERNEL_CACHE=cache, ORTC_KERNEL_CACHE_MAX_MB="%.6f" % bound_mb)
            run_env = subprocess.run([ORTC, "build", sample_path("gpt2"), "--dim", "batch=2", "--optimizer",
                                      "adamw", "--recompute", "none", "-o", os.path.join(work, "again.ortc")],
                                     capture_output=True, text=True, env=env_build)
            self.assertEqual(run_env.returncode, 0, run_env.stderr)
            left = entries(cache)
            self.assertLessEqual(sum(left.values()), bound_mb * 2**20)
            artifacts = lambda es: {k for k in es if not k.startswith("units/")}  # noqa: E731
            self.assertTrue(artifacts(new) <= set(left), "the artifact just used stays")
            self.assertFalse(artifacts(old) & set(left), "the least recently used artifact goes")

if __name__ == "__main__":
    unittest.main()
