#!/usr/bin/env python3
# Why: the CUDA target must train exactly what the CPU target trains. For every sample and
# for SGD (momentum, weight decay) and AdamW, this builds a CPU and a CUDA artifact from the
# same model and flags, trains 5 steps of each on the same feed with ortc-run, and checks
# the loss at every step and each parameter's update over the run (p5 - p0) within 1e-3
# relative. Parameters whose gradient is zero in exact arithmetic (a conv bias right before
# BatchNorm, BERT's key bias: ortc-eval's float64 gradient says which) hold only rounding noise
# on any device, which AdamW turns into full-size steps: they are not compared, nor under AdamW
# the BatchNorm running means they feed (as test/python/test_train_vs_torch.py does). One sample also runs with graph replay off and with ortc's own GEMM
# (ORTC_GPU_GEMM=ortc) in place of cuBLASLt. Under AdamW each sample is also built with
# `--recompute selective`, whose run must match the CUDA run without it within 1e-6 relative
# (RECOMPUTE_TOL; the CPU target's test asks for the same bits). SPECIAL adds builds of their
# own: gradient accumulation under a warm-up + cosine schedule (against the CPU target's run
# with the same flags), and data-parallel artifacts (plain and ZeRO-1) started torchrun-style as
# a world of one, so that their collectives go through the real NCCL (the runtime's plugin,
# libnccl.so.2 on the loader's path): the same CPU reference, and within RECOMPUTE_TOL of the
# plain CUDA run. Exit 77 (skipped) where no GPU is visible.
#
# Standard library only (the GPU machine has no package registry): .npz files are read
# and written here.
#
#   gpu_train_check.py --ortc BUILD/tools/ortc/ortc --ortc-run BUILD/runtime/ortc-run
#                      [--artifacts DIR]  (prebuilt <sample>-<opt>-<target>.ortc + feeds)
#                      [--samples NAME...] [--model NAME=PATH.onnx ...] (more models, trained
#                      like the samples: a batch dim named 'batch', logits, labels)
#
# --prepare DIR builds those artifacts and feeds and also trains the CPU ones here, leaving their
# logs and parameters in DIR: a lent GPU machine lacks the CPU kernels' libraries (oneDNN), and
# --artifacts DIR there takes the CPU side from those files.
import argparse
import json
import os
import random
import struct
import subprocess
import sys
import tempfile
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SAMPLES = ["mlp", "cnn", "gpt2", "bert"]
OPTIMIZERS = {"sgd": ["--optimizer", "sgd", "--momentum", "0.9", "--weight-decay", "0.01"],
              "adamw": ["--optimizer", "adamw"]}
TOL = 1e-3
RECOMPUTE_TOL = 1e-6
# (sample, optimizer, key, build flags, train flags, torchrun-style world of one)
SPECIAL = [("gpt2", "adamw", "accum-cosine", ["--grad-accum"],
            ["--grad-accum", "2", "--lr-schedule", "cosine", "--warmup-steps", "2", "--schedule-steps", "5"],
            False),
           ("gpt2", "adamw", "dp", ["--data-parallel"], [], True),
           ("gpt2", "adamw", "dp-zero1", ["--data-parallel", "--zero", "1", "--ranks", "1"], [], True)]
DTYPES = {"f32": ("<f4", "f", 4), "f64": ("<f8", "d", 8), "i64": ("<i8", "q", 8),
          "i32": ("<i4", "i", 4), "bool": ("|b1", "B", 1)}


def npy_bytes(descr, shape, payload):
    header = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (
        descr, "".join("%d, " % d for d in shape))
    header += " " * (63 - (10 + len(header)) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + payload


def read_npz(path):
    """{name: list of floats} for every float array of an .npz (what --save-params writes)."""
    out = {}
    with zipfile.ZipFile(path) as z:
        for name in z.namelist():
            data = z.read(name)
            hlen = struct.unpack_from("<H", data, 8)[0]
            header = data[10:10 + hlen].decode()
            descr = header.split("'descr': '")[1].split("'")[0]
            fmt = {"<f4": "f", "<f8": "d"}.get(descr)
            if fmt:
                body = data[10 + hlen:]
                out[name[:-4]] = struct.unpack("<%d%s" % (len(body) // struct.calcsize(fmt), fmt), body)
    return out


def write_feed(manifest, path):
    """Random batch for the train_step inputs: floats in [-1, 1), integers in {0, 1}
    (valid token ids and labels for every sample)."""
    rng = random.Random(0)
    inputs = set(manifest["functions"]["train_step"]["inputs"])
    with zipfile.ZipFile(path, "w") as z:
        for t in manifest["tensors"]:
            if t["role"] != "input" or t["name"] not in inputs:
                continue
            descr, fmt, _ = DTYPES[t["dtype"]]
            n = 1
            for d in t["shape"]:
                n *= d
            vals = [rng.uniform(-1, 1) for _ in range(n)] if fmt in "fd" else [rng.randint(0, 1) for _ in range(n)]
            z.writestr(t["name"] + ".npy", npy_bytes(descr, t["shape"], struct.pack("<%d%s" % (n, fmt), *vals)))


def rel(a, b):
    num = sum((x - y) ** 2 for x, y in zip(a, b)) ** 0.5
    den = sum(y * y for y in b) ** 0.5
    return num / max(den, 1e-30)


def run(cmd, env=None):
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    return p.returncode, p.stdout + p.stderr


def train(ortc_run, artifact, feed, work, tag, env=None, extra=(), reuse=False):
    """(losses of 5 steps, {param: p5 - p0}); reuse: read a run left in work by --prepare."""
    log, p0, p5 = (os.path.join(work, tag + s) for s in (".jsonl", "-p0.npz", "-p5.npz"))
    for steps, params in ((0, p0), (5, p5)) if not (reuse and os.path.exists(p5)) else ():
        code, text = run([ortc_run, "train", artifact, "--data", feed, "--steps", str(steps), "--lr", "0.01",
                          "--quiet", "--log-json", log, "--save-params", params] + list(extra), env)
        if code != 0:
            return None, text
    losses = [json.loads(line)["loss"] for line in open(log)]
    before, after = read_npz(p0), read_npz(p5)
    return (losses, {k: [a - b for a, b in zip(after[k], before[k])] for k in after}), ""


def model_path(sample, models):
    """A sample's .onnx, or the one --model NAME=PATH names."""
    return models.get(sample) or os.path.join(ROOT, "samples", sample, sample + ".onnx")


def noise_only(ortc_eval, onnx_path, sample, feed, work):
    """Parameters whose float64 gradient at the start is zero up to rounding (see the top)."""
    out = os.path.join(work, sample + "-eval.npz")
    code, text = run([ortc_eval, onnx_path, "--inputs", feed,
                      "-o", out, "--dim", "batch=4", "--gradients", "--no-dropout", "--labels", "labels"])
    if code != 0:
        raise SystemExit("FAIL %s: ortc-eval:\n%s" % (sample, text))
    values = read_npz(out)
    names = [n for n in values if n.startswith("grad/")]
    return sorted(n[len("grad/"):] for n in names if max(map(abs, values[n])) < 1e-9)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ortc", default=os.path.join(ROOT, "build/tools/ortc/ortc"))
    ap.add_argument("--ortc-run", default=os.path.join(ROOT, "build/runtime/ortc-run"))
    ap.add_argument("--ortc-eval", default=os.path.join(ROOT, "build/tools/ortc-eval/ortc-eval"))
    ap.add_argument("--artifacts", help="prebuilt artifacts (see --prepare)")
    ap.add_argument("--prepare", help="only build the artifacts and feeds into this folder")
    ap.add_argument("--samples", nargs="*", default=SAMPLES)
    ap.add_argument("--model", action="append", default=[], metavar="NAME=PATH",
                    help="also train this .onnx (a batch dim named 'batch', logits, labels) like a sample")
    ap.add_argument("--target", default="cuda", help=argparse.SUPPRESS)  # cpu: test this script
    args = ap.parse_args()
    if args.target == "cuda" and not args.prepare and not os.path.exists("/dev/nvidia0") and not os.path.isdir("/proc/driver/nvidia/gpus"):
        print("no NVIDIA GPU visible: skipped")
        return 77
    work = args.prepare or tempfile.mkdtemp(prefix="ortc-gpu-")
    os.makedirs(work, exist_ok=True)
    art = args.artifacts or work
    more_models = dict(m.split("=", 1) for m in args.model)
    failures = 0
    for sample in args.samples + sorted(more_models):
        for opt, flags in OPTIMIZERS.items():
            paths = {}
            builds = [("cpu", "cpu", ()), ("cuda", args.target, ())]
            if opt == "adamw":
                builds.append(("cuda-recompute", args.target, ("--recompute", "selective")))
            special = [sp for sp in SPECIAL if sp[:2] == (sample, opt)]
            for _, _, key, more, train_flags, dp in special:
                if not dp:  # data parallel on one rank has the plain CPU run as reference
                    builds.append(("cpu-" + key, "cpu", more))
                builds.append(("cuda-" + key, args.target, more))
            for key, target, more in builds:
                paths[key] = os.path.join(art, "%s-%s-%s.ortc" % (sample, opt, key))
                if not args.artifacts:
                    code, text = run([args.ortc, "build", model_path(sample, more_models),
                                      "--dim", "batch=4", "--target", target, "-o", paths[key]] + flags + list(more))
                    if code != 0:
                        print("FAIL %s %s: build for %s:\n%s" % (sample, opt, target, text))
                        return 1
            feed = os.path.join(art, "%s-feed.npz" % sample)
            noise = os.path.join(art, "%s-noise.json" % sample)
            if not args.artifacts and not os.path.exists(feed):
                write_feed(json.load(open(os.path.join(paths["cpu"], "manifest.json"))), feed)
            if not args.artifacts and not os.path.exists(noise):
                with open(noise, "w") as f:
                    json.dump(noise_only(args.ortc_eval, model_path(sample, more_models), sample, feed, work), f)
            with open(noise) as f:
                skip = set(json.load(f))
            if args.prepare:
                cpu_runs = [("cpu", ())] + [("cpu-" + sp[2], sp[4]) for sp in special if not sp[5]]
                for key, extra in cpu_runs:
                    ref, text = train(args.ortc_run, paths[key], feed, art, "%s-%s-%s" % (sample, opt, key),
                                      extra=extra)
                    if ref is None:
                        print("FAIL %s %s: %s run:\n%s" % (sample, opt, key, text))
                        return 1
                continue
            variants = [("cuda", None, ())]
            if sample == "gpt2" and opt == "adamw":
                variants += [("cuda-no-graphs", None, ("--no-graphs",)),
                             ("cuda-ortc-gemm", dict(os.environ, ORTC_GPU_GEMM="ortc"), ())]
            ref, text = train(args.ortc_run, paths["cpu"], feed, art if args.artifacts else work,
                              "%s-%s-cpu" % (sample, opt), reuse=bool(args.artifacts))
            if ref is None:
                print("FAIL %s %s: cpu run:\n%s" % (sample, opt, text))
                return 1
            runs = {}
            for name, env, extra in variants:
                got, text = train(args.ortc_run, paths["cuda"], feed, work, "%s-%s-%s" % (sample, opt, name), env, extra)
                runs[name] = got
                if got is None:
                    if "there is none" in text:
                        print("no usable GPU (%s): skipped" % text.strip())
                        return 77
                    print("FAIL %s %s %s:\n%s" % (sample, opt, name, text))
                    failures += 1
                    continue
                loss_err = max(abs(a - b) / max(abs(b), 1e-30) for a, b in zip(got[0], ref[0]))
                upd_err = max(rel(got[1][k], ref[1][k]) for k in ref[1]
                              if k not in skip and not (opt == "adamw" and skip and k.endswith("running_mean")))
                ok = loss_err <= TOL and upd_err <= TOL and len(got[0]) == len(ref[0]) == 5
                failures += not ok
                print("%-4s %-5s %-15s loss max rel %.2e, update max rel %.2e: %s%s" % (
                    sample, opt, name, loss_err, upd_err, "ok" if ok else "FAIL",
                    " (noise only, not compared: %s)" % ", ".join(sorted(skip)) if skip else ""))
            base = runs.get("cuda")
            for _, _, key, _, extra, dp in special:
                env = None
                if dp:
                    env = dict(os.environ, RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1",
                               MASTER_PORT=str(29400 + len(key)))
                    sref = ref
                else:
                    sref, text = train(args.ortc_run, paths["cpu-" + key], feed, art if args.artifacts else work,
                                       "%s-%s-cpu-%s" % (sample, opt, key), extra=extra, reuse=bool(args.artifacts))
                got, text = train(args.ortc_run, paths["cuda-" + key], feed, work,
                                  "%s-%s-cuda-%s" % (sample, opt, key), env, extra)
                if got is None or sref is None:
                    print("FAIL %s %s cuda-%s:\n%s" % (sample, opt, key, text))
                    failures += 1
                    continue
                loss_err = max(abs(a - b) / max(abs(b), 1e-30) for a, b in zip(got[0], sref[0]))
                upd_err = max(rel(got[1][k], sref[1][k]) for k in sref[1] if k not in skip)
                ok = loss_err <= TOL and upd_err <= TOL and len(got[0]) == 5
                note = ""
                if dp and base:  # one rank through NCCL: the plain CUDA run's numbers
                    same = max(max(abs(a - b) / max(abs(b), 1e-30) for a, b in zip(got[0], base[0])),
                               max(rel(got[1][k], base[1][k]) for k in base[1] if k in got[1] and k not in skip))
                    ok = ok and same <= RECOMPUTE_TOL
                    note = ", vs cuda %.2e" % same
                failures += not ok
                print("%-4s %-5s %-15s loss max rel %.2e, update max rel %.2e%s: %s" % (
                    sample, opt, "cuda-" + key, loss_err, upd_err, note, "ok" if ok else "FAIL"))
            if "cuda-recompute" in paths and base:
                got, text = train(args.ortc_run, paths["cuda-recompute"], feed, work,
                                  "%s-%s-cuda-recompute" % (sample, opt))
                if got is None:
                    print("FAIL %s %s cuda-recompute:\n%s" % (sample, opt, text))
                    failures += 1
                    continue
                loss_err = max(abs(a - b) / max(abs(b), 1e-30) for a, b in zip(got[0], base[0]))
                upd_err = max(rel(got[1][k], base[1][k]) for k in base[1] if k not in skip)
                ok = loss_err <= RECOMPUTE_TOL and upd_err <= RECOMPUTE_TOL
                failures += not ok
                print("%-4s %-5s %-15s vs cuda: loss max rel %.2e, update max rel %.2e: %s" % (
                    sample, opt, "cuda-recompute", loss_err, upd_err, "ok" if ok else "FAIL"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
