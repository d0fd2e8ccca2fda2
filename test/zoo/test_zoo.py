# The model zoo (test/zoo, made by make_zoo.py from PyTorch 2.x exports of small random-init
# real-world models) trained by ortc on the CPU target, judged against PyTorch's float64 run with
# PyTorch's float32 run as the yardstick, as test/python/test_train_vs_torch.py does for the
# samples. Needs only numpy and the ortc binary: every PyTorch number is in the .npz fixtures.
#
# For each file of zoo.json and each optimizer (SGD momentum 0.9 weight decay 0.01; AdamW weight
# decay 0.01): `ortc build` (plus the manifest's flags), `ortc train` 5 steps on the fixed batch,
# then per step |L - L64| / max(|L64|, 1e-3) <= max(1e-4, 3 x PyTorch f32's), and per trained
# tensor ||dp - dp64|| / ||dp64|| <= max(2e-3, 3 x PyTorch f32's) with dp = p5 - p0 (noise_only
# tensors skipped); constants ortc saved must be unchanged, and ortc must train nothing that is
# neither a torch parameter nor a BatchNorm statistic. "PyTorch f32's" distance is the largest of
# its plain float32 run and of its runs from one-ulp-perturbed starts (the fixture's spread, see
# make_zoo.py): where float32 rounding decides the trajectory, one run is one draw of a coin.
#
# Expected failures are listed in xfail.txt (`<model>.<exporter>[/<opt>] <reason>`), strictly
# unless the reason starts "unstable:" (measured float32 chaos, may pass or fail): a
# listed case that passes fails the test. Options (before unittest's own):
#   --table FILE        write a markdown table model x exporter (✓ / ✗ and why) to FILE
#   --update-xfail      rewrite xfail.txt from this run's failures
#   --readme            rewrite the zoo table of the top-level README.md (a full run
#                       without it fails when that table differs from the run's results)
# Environment: ORTC_BUILD (default build/), ORTC_KERNEL_CACHE (default $ORTC_BUILD/kernel-cache),
# ZOO_JOBS (cases built and trained at once, default 2), ZOO_ONLY (comma-separated file names).
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import unittest
from concurrent.futures import ThreadPoolExecutor

import numpy as np

ZOO = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(ZOO))
BUILD = os.environ.get("ORTC_BUILD", os.path.join(ROOT, "build"))
ORTC = os.path.join(BUILD, "tools", "ortc", "ortc")
ENV = dict(os.environ)
ENV.setdefault("ORTC_KERNEL_CACHE", os.path.join(BUILD, "kernel-cache"))
ENV.setdefault("ORTC_CXX_OPT", "-O1")
XFAIL = os.path.join(ZOO, "xfail.txt")
# Each case trains at one and two threads (the pool splits the work differently).
THREADS = (1, 2)
OPTS = {
    "sgd": ["--optimizer", "sgd", "--momentum", "0.9", "--weight-decay", "0.01"],
    "adamw": ["--optimizer", "adamw", "--weight-decay", "0.01"],
}
LOSS_FLOOR, UPDATE_FLOOR, SLACK = 1e-4, 2e-3, 3.0


def load_manifest():
    with open(os.path.join(ZOO, "zoo.json")) as f:
        m = json.load(f)
    only = [s for s in os.environ.get("ZOO_ONLY", "").split(",") if s]
    if only:
        m["files"] = [e for e in m["files"] if e["file"] in only or e["model"] in only]
        m["failed_exports"] = [e for e in m.get("failed_exports", []) if e["model"] in only]
    return m


def load_xfail():
    """{case or file: reason}; a key without /opt covers both optimizers."""
    out = {}
    if os.path.exists(XFAIL):
        with open(XFAIL) as f:
            for line in f:
                line = line.strip()
                if line and not line.startswith("#"):
                    key, _, reason = line.partition(" ")
                    out[key] = reason.strip()
    return out


def rel_err(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def loss_err(got, want64):
    return abs(float(got) - float(want64)) / max(abs(float(want64)), 1e-3)


def summarize_error(text, onnx_path):
    """One line for a failed command: ortc's first error line (the model path shortened), and for
    an import error listing problems, the distinct unsupported ops and other problems."""
    lines = [l.rstrip() for l in text.splitlines() if l.strip()]
    if not lines:
        return "no output"
    first = next((l for l in lines if "error" in l.lower()), lines[0]).strip()
    first = first.replace(onnx_path, os.path.basename(onnx_path))
    items = [l.strip()[2:] for l in lines if l.strip().startswith("- ")]
    if not items:
        return first
    ops = sorted({m.group(1) for l in items for m in [re.search(r"unsupported op (\S+)", l)] if m})
    nograd = sorted({m.group(1) for l in items for m in [re.match(r"(ortc\.\w+) at loc", l)] if m})
    if nograd:
        return first + " " + ", ".join(nograd)
    other = []
    for l in items:
        if "unsupported op" in l:
            continue
        l = re.sub(r"^node '[^']*' ", "", l)
        if l not in other:
            other.append(l)
    parts = []
    if ops:
        parts.append("unsupported ops: " + ", ".join(ops))
    parts += other[:4]
    if len(other) > 4:
        parts.append("(%d more)" % (len(other) - 4))
    return first + " " + "; ".join(parts)


def run_case(entry, opt):
    """Builds and trains one case; returns {stage: build|train|oracle|ok, error, detail, worst, time}."""
    t0 = time.time()
    onnx_path = os.path.join(ZOO, entry["file"] + ".onnx")
    ref = np.load(os.path.join(ZOO, entry["file"] + ".npz"))
    res = {"case": "%s/%s" % (entry["file"], opt), "stage": "ok", "error": "", "detail": [], "worst": {}}
    with tempfile.TemporaryDirectory(prefix="ortc-zoo-") as d:
        art = os.path.join(d, "m.ortc")
        cmd = [ORTC, "build", onnx_path, "-o", art] + OPTS[opt] + list(entry["flags"])
        p = subprocess.run(cmd, capture_output=True, text=True, env=ENV)
        if p.returncode != 0:
            res.update(stage="build", error=summarize_error(p.stderr + p.stdout, onnx_path),
                       detail=(p.stderr + p.stdout).splitlines()[:60], time=time.time() - t0)
            return res
        feed = {n["name"]: ref[n["name"]] for n in entry["inputs"]}
        feed["labels"] = ref["labels"]
        np.savez(os.path.join(d, "feed.npz"), **feed)
        log, params = os.path.join(d, "log.jsonl"), os.path.join(d, "p.npz")
        lr = entry["lr"][opt]
        failures = []
        for threads in THREADS:
            cmd = [ORTC, "train", art, "--data", os.path.join(d, "feed.npz"), "--steps",
                   str(entry["steps"]), "--lr", repr(lr), "--log-json", log, "--save-params", params,
                   "--threads", str(threads)]
            p = subprocess.run(cmd, capture_output=True, text=True, env=ENV)
            if p.returncode != 0:
                res.update(stage="train", error=summarize_error(p.stderr + p.stdout, onnx_path),
                           detail=(p.stderr + p.stdout).splitlines()[:60], time=time.time() - t0)
                return res
            with open(log) as f:
                losses = [json.loads(line)["loss"] for line in f if line.strip()]
            trained = dict(np.load(params))
            failures += ["%d thread%s: %s" % (threads, "s" if threads > 1 else "", f)
                         for f in oracle(entry, opt, ref, losses, trained, res["worst"])]
    res["time"] = time.time() - t0
    res["detail"] = failures
    if failures:
        res.update(stage="oracle", error=failures[0])
    return res


def oracle(entry, opt, ref, losses, trained, worst):
    """Failure messages of one ortc run against the fixtures (empty: pass)."""
    failures = []
    l64, l32 = ref["float64/%s/losses" % opt], ref["float32/%s/losses" % opt]
    if len(losses) != len(l64):
        return ["%d losses logged, want %d" % (len(losses), len(l64))]
    for key in ("loss", "loss32", "update", "update32"):  # the worst over every run
        worst.setdefault(key, 0.0)
    spread = ref.get("float32/%s/spread/losses_err" % opt, np.zeros(len(l64)))
    for i, (l, a, b) in enumerate(zip(losses, l64, l32)):
        e, e32 = loss_err(l, a), max(loss_err(b, a), float(spread[i]))
        worst["loss"], worst["loss32"] = max(worst["loss"], e), max(worst["loss32"], e32)
        if not e <= max(LOSS_FLOOR, SLACK * e32):
            failures.append("step %d: loss %r is %.2e from float64 %r (PyTorch float32: %.2e)" % (i + 1, l, e, a, e32))
    noise = set(entry["noise_only"])
    for name in entry["trainable"] + entry["buffers"]:
        if name in noise:
            continue
        if name not in trained:
            failures.append("ortc did not train '%s'" % name)
            continue
        p0 = ref["init/" + name].astype(np.float64)
        dp = trained[name].astype(np.float64) - p0
        if dp.shape != p0.shape:
            failures.append("'%s' saved with shape %s, want %s" % (name, dp.shape, p0.shape))
            continue
        dp64 = ref["float64/%s/update/%s" % (opt, name)].astype(np.float64)
        e32 = max(float(ref["float32/%s/update_err/%s" % (opt, name)]),
                  float(ref.get("float32/%s/spread/update_err/%s" % (opt, name), 0.0)))
        e = rel_err(dp, dp64)
        worst["update"], worst["update32"] = max(worst["update"], e), max(worst["update32"], e32)
        if not e <= max(UPDATE_FLOOR, SLACK * e32):
            failures.append("update of '%s' is %.2e from float64 (PyTorch float32: %.2e)" % (name, e, e32))
    known = set(entry["trainable"]) | set(entry["buffers"])
    for name in sorted(trained):
        if name in known:
            continue
        if name in entry["constants"]:
            key = "const/" + name
            if key in ref and not np.array_equal(np.asarray(trained[name]).astype(ref[key].dtype), ref[key]):
                failures.append("ortc changed constant '%s' (max change %.3g)" % (
                    name, float(np.abs(trained[name].astype(np.float64) - ref[key]).max())))
        else:
            failures.append("ortc trained '%s', which is neither a parameter nor a buffer" % name)
    return failures


class Zoo(unittest.TestCase):
    manifest = load_manifest()
    xfail = load_xfail()
    results = {}

    @classmethod
    def setUpClass(cls):
        cases = [(e, o) for e in cls.manifest["files"] for o in OPTS]
        jobs = max(1, int(os.environ.get("ZOO_JOBS", "2")))
        t0 = time.time()
        with ThreadPoolExecutor(jobs) as pool:
            for r in pool.map(lambda c: run_case(*c), cases):
                cls.results[r["case"]] = r
        cls.elapsed = time.time() - t0

    def check(self, entry, opt):
        case = "%s/%s" % (entry["file"], opt)
        r = self.results[case]
        xf = self.xfail.get(case, self.xfail.get(entry["file"]))
        w = r["worst"]
        print("%-36s %-6s %5.1fs %s" % (case, r["stage"], r.get("time", 0.0), (
            "loss %.1e (f32 %.1e), update %.1e (f32 %.1e)" % (w["loss"], w["loss32"], w["update"], w["update32"])
            if w else r["error"])))
        if xf is not None:
            if r["stage"] == "ok" and xf.startswith("unstable:"):
                return  # measured chaos: a pass is as expected as a failure
            if r["stage"] == "ok":
                self.fail("%s passes but is listed in xfail.txt (%s): remove it" % (case, xf))
            raise unittest.SkipTest("xfail: %s" % r["error"])
        self.assertEqual(r["stage"], "ok", "%s failed at %s: %s\n%s" % (
            case, r["stage"], r["error"], "\n".join(r["detail"])))


for _e in Zoo.manifest["files"]:
    for _o in OPTS:
        setattr(Zoo, "test_%s_%s" % (_e["file"].replace(".", "_"), _o),
                lambda self, e=_e, o=_o: self.check(e, o))


def table_lines(manifest, results, short=False):
    """Markdown table model x exporter: ✓, or ✗ with the stage and first error (short:
    trimmed for the top-level README)."""
    by = {}
    unstable = {k.split("/")[0] for k, v in load_xfail().items() if v.startswith("unstable:")}
    for e in manifest["files"]:
        rs = [results.get("%s/%s" % (e["file"], o)) for o in OPTS]
        if any(r is None for r in rs):
            continue
        bad = [(o, r) for o, r in zip(OPTS, rs) if r["stage"] != "ok"]
        if e["file"] in unstable and short:
            # The same text whichever way the coin falls, so the README check holds on any CPU.
            by[(e["model"], e["exporter"])] = ("≈ float32 chaos: the oracle cannot judge it "
                                               "(a float32 run flips with rounding; test/zoo/xfail.txt)")
        elif not bad:
            by[(e["model"], e["exporter"])] = "✓"
        else:
            stages = {r["stage"] for _, r in bad}
            o, r = bad[0]
            which = "" if len(bad) == len(OPTS) and len({r["error"] for _, r in bad}) == 1 else " (%s)" % o
            err = r["error"].replace("|", "\\|")
            if short:
                m = re.search(r"step (\d+): loss \S+ is (\S+) from float64 \S+ \(PyTorch float32: (\S+)\)", err)
                err = ("step %s loss %s from float64 (PyTorch float32 %s)" % m.groups() if m else
                       re.sub(r"^ortc: error: [^:]*: (\d+ problems: )?", "", err)[:90])
            by[(e["model"], e["exporter"])] = "✗ %s%s: %s" % ("/".join(sorted(stages)), which, err)
    for f in manifest.get("failed_exports", []):
        reason = f["reason"].replace("|", "\\|")
        if short:
            m = re.search(r"Exporting the operator '([^']+)'", reason)
            reason = ("the exporter cannot export %s" % m.group(1)) if m else reason[:90]
        by[(f["model"], f["exporter"])] = "✗ export: " + reason[:300]
    models = []
    for e in manifest["files"] + manifest.get("failed_exports", []):
        if e["model"] not in models:
            models.append(e["model"])
    lines = ["| model | dynamo (opset 18) | legacy (opset 17) |", "|---|---|---|"]
    for m in models:
        lines.append("| %s | %s | %s |" % (m, by.get((m, "dynamo"), "-"), by.get((m, "legacy"), "-")))
    return lines


def write_table(path, manifest, results):
    with open(path, "w") as f:
        f.write("\n".join(table_lines(manifest, results)) + "\n")


README = os.path.join(ROOT, "README.md")
README_BEGIN = "<!-- zoo table: written by test/zoo/test_zoo.py --readme; checked by ctest -->"
README_END = "<!-- end of zoo table -->"


def readme_block(manifest, results):
    return "\n".join([README_BEGIN] + table_lines(manifest, results, short=True) + [README_END])


def readme_drift(manifest, results, write=False):
    """None when README.md's zoo table is what this run produced (or, with write, after
    rewriting it); else a message. Only a run over the whole zoo can judge it."""
    with open(README) as f:
        text = f.read()
    if README_BEGIN not in text or README_END not in text:
        return "README.md has no zoo table markers"
    a, b = text.index(README_BEGIN), text.index(README_END) + len(README_END)
    want = readme_block(manifest, results)
    if text[a:b] == want:
        return None
    if write:
        with open(README, "w") as f:
            f.write(text[:a] + want + text[b:])
        return None
    return "README.md's zoo table is stale: rerun `python test/zoo/test_zoo.py --readme`"


def write_xfail(manifest, results):
    """Rewrites xfail.txt from this run; entries of files this run did not cover, and
    "unstable:" entries (a person's measured judgement), stay."""
    ran = {e["file"] for e in manifest["files"]}
    lines = ["# Zoo cases expected to fail (test_zoo.py, strict: a listed case that passes fails).",
             "# <model>.<exporter>[/<opt>] <reason: the stage and ortc's first error>",
             '# A reason starting "unstable:" is not strict: the case may pass or fail (reported either way).']
    old = load_xfail()
    kept = {k: v for k, v in old.items() if k.split("/")[0] not in ran or v.startswith("unstable:")}
    unstable = {k.split("/")[0] for k, v in old.items() if v.startswith("unstable:")}
    lines += ["%s %s" % kv for kv in sorted(kept.items())]
    for e in manifest["files"]:
        if e["file"] in unstable:
            continue
        rs = {o: results["%s/%s" % (e["file"], o)] for o in OPTS}
        bad = {o: r for o, r in rs.items() if r["stage"] != "ok"}
        if len(bad) == len(OPTS) and len({r["error"] for r in bad.values()}) == 1:
            r = next(iter(bad.values()))
            lines.append("%s %s: %s" % (e["file"], r["stage"], r["error"]))
        else:
            for o, r in bad.items():
                lines.append("%s/%s %s: %s" % (e["file"], o, r["stage"], r["error"]))
    with open(XFAIL, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    table = update = readme = None
    argv = [sys.argv[0]]
    args = iter(sys.argv[1:])
    for a in args:
        if a == "--table":
            table = next(args)
        elif a == "--update-xfail":
            update = True
        elif a == "--readme":
            readme = True
        else:
            argv.append(a)
    prog = unittest.main(argv=argv, exit=False, verbosity=2)
    if table:
        write_table(table, Zoo.manifest, Zoo.results)
    if update:
        write_xfail(Zoo.manifest, Zoo.results)
    ok = prog.result.wasSuccessful()
    # The README's table is generated: a full run rewrites it (--readme) or checks it.
    if not os.environ.get("ZOO_ONLY") and Zoo.results:
        drift = readme_drift(Zoo.manifest, Zoo.results, write=bool(readme))
        if drift:
            print("FAIL: " + drift)
            ok = False
    if Zoo.results:
        print("zoo: %d cases in %.1fs" % (len(Zoo.results), getattr(Zoo, "elapsed", 0.0)))
    sys.exit(not ok)
