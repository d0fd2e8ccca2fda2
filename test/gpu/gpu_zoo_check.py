#!/usr/bin/env python3
# Why: the emulated device (test/gpu/emu) proves the logic of the GPU code on every zoo model in
# CI, in emulated float arithmetic on the host; this proves it on a real GPU, against the same
# fixtures and the same bar as the CPU target. Each zoo file (test/zoo) is built for CUDA and
# trained with AdamW by ortc-run on the GPU; every step's loss and every parameter's update are
# judged against PyTorch's float64 run with PyTorch's float32 run as the yardstick
# (test_zoo.oracle). A case listed in test/zoo/xfail.txt may pass or fail here (the GPU's sums
# run in another order than the CPU's): it is reported, not counted. Exit 77 (skipped) where no
# NVIDIA GPU is visible. Needs numpy.
#
# The compiler cannot travel to a lent GPU machine, so the work can split in two:
#   gpu_zoo_check.py --prepare DIR [--arch sm_90]   (here: builds DIR/<file>.ortc + feeds)
#   gpu_zoo_check.py --artifacts DIR                (there: trains and judges)
# Without either it builds into a temporary folder and runs (ctest label gpu).
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "test", "zoo"))
import test_zoo  # noqa: E402

OPT = "adamw"


def gpu_visible():
    return os.path.exists("/dev/nvidia0") or os.path.isdir("/proc/driver/nvidia/gpus")


def prepare(args, entry, out):
    """Builds one zoo file for CUDA into out/<file>.ortc and writes out/<file>-feed.npz."""
    ref = np.load(os.path.join(test_zoo.ZOO, entry["file"] + ".npz"))
    art = os.path.join(out, entry["file"] + ".ortc")
    cmd = [args.ortc, "build", os.path.join(test_zoo.ZOO, entry["file"] + ".onnx"), "-o", art, "--target", "cuda"]
    cmd += (["--arch", args.arch] if args.arch else []) + test_zoo.OPTS[OPT] + list(entry["flags"])
    p = subprocess.run(cmd, capture_output=True, text=True, env=test_zoo.ENV)
    if p.returncode:
        return "build: " + test_zoo.summarize_error(p.stderr + p.stdout, entry["file"])
    feed = {n["name"]: ref[n["name"]] for n in entry["inputs"]}
    feed["labels"] = ref["labels"]
    np.savez(os.path.join(out, entry["file"] + "-feed.npz"), **feed)
    return None


def check(args, entry, art_dir, work):
    """Failure messages of one zoo file trained on the GPU (empty: pass), and the worst errors."""
    ref = np.load(os.path.join(test_zoo.ZOO, entry["file"] + ".npz"))
    art = os.path.join(art_dir, entry["file"] + ".ortc")
    log, params = os.path.join(work, entry["file"] + ".jsonl"), os.path.join(work, entry["file"] + "-p.npz")
    cmd = [args.ortc_run, "train", art, "--data", os.path.join(art_dir, entry["file"] + "-feed.npz"),
           "--steps", str(entry["steps"]), "--lr", repr(entry["lr"][OPT]), "--quiet", "--log-json", log,
           "--save-params", params]
    p = subprocess.run(cmd, capture_output=True, text=True)
    worst = {}
    if p.returncode:
        return ["train: " + (p.stderr + p.stdout).strip()[-2000:]], worst
    with open(log) as f:
        losses = [json.loads(line)["loss"] for line in f if line.strip()]
    return test_zoo.oracle(entry, OPT, ref, losses, dict(np.load(params)), worst), worst


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ortc", default=os.path.join(ROOT, "build/tools/ortc/ortc"))
    ap.add_argument("--ortc-run", default=os.path.join(ROOT, "build/runtime/ortc-run"))
    ap.add_argument("--prepare", metavar="DIR", help="only build the artifacts and feeds into DIR")
    ap.add_argument("--artifacts", metavar="DIR", help="artifacts and feeds made by --prepare")
    ap.add_argument("--arch", help="ortc build --arch (default: the CUDA target's)")
    ap.add_argument("--only", help="comma-separated zoo file names")
    args = ap.parse_args()
    entries = test_zoo.load_manifest()["files"]
    if args.only:
        entries = [e for e in entries if e["file"] in args.only.split(",")]
    if not args.prepare and not gpu_visible():
        print("no NVIDIA GPU visible: skipped")
        return 77
    xfail = test_zoo.load_xfail()
    art_dir = args.prepare or args.artifacts or tempfile.mkdtemp(prefix="ortc-gpu-zoo-")
    os.makedirs(art_dir, exist_ok=True)
    work = tempfile.mkdtemp(prefix="ortc-gpu-zoo-run-")
    failures = 0
    for entry in entries:
        if not args.artifacts:
            error = prepare(args, entry, art_dir)
            if error:
                print("%-28s FAIL %s" % (entry["file"], error))
                failures += 1
                continue
        if args.prepare:
            print("%-28s prepared" % entry["file"])
            continue
        problems, worst = check(args, entry, art_dir, work)
        known = xfail.get(entry["file"] + "/" + OPT) or xfail.get(entry["file"])
        status = "ok" if not problems else ("xfail (%s)" % known.split(":")[0] if known else "FAIL")
        failures += status == "FAIL"
        print("%-28s %s  loss %.1e (f32 %.1e)  update %.1e (f32 %.1e)%s" % (
            entry["file"], status, worst.get("loss", float("nan")), worst.get("loss32", float("nan")),
            worst.get("update", float("nan")), worst.get("update32", float("nan")),
            "" if not problems else "\n    " + "\n    ".join(problems[:3])))
        sys.stdout.flush()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
