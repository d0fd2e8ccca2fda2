"""PyTorch's own mixed precision as the oracle of `ortc build --precision bf16|fp16`.

Why: a 16-bit run is far from float64 by design; the question is whether ortc's is as near as
PyTorch's. This script records, for a few models, PyTorch 2.x's float64 trajectory and its CPU
autocast trajectories (bf16, and fp16 with torch.amp.GradScaler("cpu")) over STEPS AdamW steps on
one fixed batch, so that test_mixed_precision.py can judge ortc with numpy and the ortc binary only
(Debian's PyTorch 1.13 has neither CPU fp16 autocast nor GradScaler("cpu"); CI never runs this).

How to run (by hand, in the zoo's venv, see test/zoo/make_zoo.py):

    .venv-zoo/bin/python test/mixed_precision/make_references.py           # every model
    .venv-zoo/bin/python test/mixed_precision/make_references.py gpt       # a subset
    .venv-zoo/bin/python test/mixed_precision/make_references.py --spread-only gpt  # keep the
        # stored float64 and first autocast runs, (re)compute the perturbed ones

Models: `gpt` is bench/bench_cpu.py's "gpt d128 L4 T64" (samples/gpt2's decoder, 4 layers, d 128,
2 heads, T 64, vocab 512, batch 8) with dropout 0, exported here as the zoo's legacy files are
(make_zoo.export: TorchScript exporter, opset 17, training mode, no constant folding; constant-valued
parameters perturbed) to gpt.onnx; `gpt2.dynamo` and `resnet18.legacy` are the zoo's files (their
seeded models rebuilt by make_zoo.make, matched to the ONNX initializers by make_zoo's rules).

It writes test/mixed_precision/<model>.npz and references.json (per model: the ONNX file, ortc
build flags, lr, steps, the trainable initializers, PyTorch's distances to float64). Keys of the .npz:
  <input>, labels                    the batch every step trains on
  float64/losses                     PyTorch float64's loss at each step
  float64/update/<init>              p_STEPS - p_0 of the float64 run, ONNX layout (float32)
  <dt>/losses                        PyTorch autocast's loss at each step, dt in bf16, fp16
  <dt>/loss_dists                    mean |loss - float64 loss| over the steps, of RUNS autocast runs:
                                     the recorded one and two whose initial weights are perturbed by
                                     about one float32 rounding (the spread of equally valid runs; a
                                     200-step 16-bit trajectory is partly chaotic)
  <dt>/update_errs                   ||dp - dp64|| / ||dp64|| over every parameter together, same runs
  fp16/scales                        GradScaler's scale at each step (its skipped steps kept it)
"""
import json
import os
import re
import sys

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "test", "zoo"))
sys.path.insert(0, os.path.join(REPO, "samples"))
import make_zoo  # noqa: E402

STEPS = 200
RUNS = 3  # autocast runs per precision: as recorded, and from two starts one rounding away
MODELS = {
    "gpt": dict(lr=1e-3),
    "gpt2.dynamo": dict(lr=1e-3),
    "gru.legacy": dict(lr=1e-3),
    # BatchNorm in training mode (the dynamo export's is eval). Chaotic: batch 4, the last
    # BatchNorms normalise over 16 values, and PyTorch's own bf16 update is ~40% off float64
    # (72% at lr 1e-3): the test reports its distances and does not judge them.
    "resnet18.legacy": dict(lr=1e-4, chaotic=True),
}


def gpt_model():
    import common
    mod = common.load_sample("gpt2")
    mod.VOCAB, mod.C, mod.HEADS, mod.LAYERS, mod.SEQ, mod.P = 512, 128, 2, 4, 64, 0.0
    mod.NUM_CLASSES = mod.VOCAB
    model = make_zoo.perturb_constant_params(common.build(mod))
    common.set_dropout(model, 0.0)
    path = os.path.join(HERE, "gpt.onnx")
    feed = common.make_batch(mod, np.random.RandomState(0), 8)
    labels = feed.pop("labels")
    make_zoo.export(model, feed, "legacy", path, False)
    return model, feed, labels, -1, path


def zoo_model(name):
    base = name.split(".")[0]
    model, feed, labels, _classes, axis, _notes, _shape = make_zoo.make(base)
    return model, feed, labels, axis, os.path.join(REPO, "test", "zoo", name + ".onnx")


def loss_fn(logits, labels, axis):
    return make_zoo.loss_fn(logits.float(), labels, axis)


def run(model, feed, labels, axis, lr, mode, perturb=None):
    """AdamW trajectory: mode float64, bf16 or fp16 (CPU autocast; fp16 with GradScaler).
    `perturb` (a seed): every initial weight times (1 + 2^-23 n), n ~ N(0, 1): an equally valid
    start, one float32 rounding away."""
    import copy
    m = copy.deepcopy(model).train()
    m = m.double() if mode == "float64" else m.float()
    if perturb is not None:
        g = torch.Generator().manual_seed(perturb)
        with torch.no_grad():
            for p in m.parameters():
                p.mul_(1 + 2.0 ** -23 * torch.randn(p.shape, generator=g))
    ps = [p for _, p in m.named_parameters()]
    opt = torch.optim.AdamW(ps, lr=lr, weight_decay=0.01, eps=1e-8)
    fdt = torch.float64 if mode == "float64" else torch.float32
    args = [torch.from_numpy(a).to(fdt) if a.dtype.kind == "f" else torch.from_numpy(a) for a in feed.values()]
    lab = torch.from_numpy(labels)
    scaler = torch.amp.GradScaler("cpu") if mode == "fp16" else None
    losses, scales = [], []
    for _ in range(STEPS):
        opt.zero_grad(set_to_none=True)
        if mode == "float64":
            loss = make_zoo.loss_fn(m(*args), lab, axis)
        else:
            with torch.autocast("cpu", dtype=torch.bfloat16 if mode == "bf16" else torch.float16):
                loss = loss_fn(m(*args), lab, axis)
        if scaler:
            scales.append(scaler.get_scale())
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()
        losses.append(loss.item())
    return np.array(losses, np.float64), {n: p.detach().double() for n, p in m.named_parameters()}, scales


def main():
    args = sys.argv[1:]
    # --spread-only: keep the stored float64 run and first autocast runs, add the perturbed ones.
    spread_only = "--spread-only" in args
    names = [a for a in args if not a.startswith("--")] or list(MODELS)
    manifest_path = os.path.join(HERE, "references.json")
    manifest = json.load(open(manifest_path)) if os.path.exists(manifest_path) else {}
    torch.manual_seed(0)
    for name in names:
        lr = MODELS[name]["lr"]
        model, feed, labels, axis, onnx_path = gpt_model() if name == "gpt" else zoo_model(name)
        import onnx
        inits = make_zoo.float_inits(onnx.load(onnx_path))
        mapping, params, _bn, _other = make_zoo.map_initializers(model, inits, set())
        trainable = sorted(o for o, (t, _) in mapping.items() if t in params)
        p0 = {n: p.detach().double() for n, p in model.named_parameters()}

        def onnx_update(trained):
            out = {}
            for o in trainable:
                t, layout = mapping[o]
                d = (trained[t] - p0[t]).numpy()
                out[o] = d.T if layout == "transposed" else d
            return out

        if spread_only:
            res = dict(np.load(os.path.join(HERE, name + ".npz")))
            l64 = res["float64/losses"]
            d64 = {o: res["float64/update/" + o].astype(np.float64) for o in trainable}
        else:
            l64, t64, _ = run(model, feed, labels, axis, lr, "float64")
            d64 = onnx_update(t64)
            res = dict(feed)
            res["labels"] = labels
            res["float64/losses"] = l64
            for o in trainable:
                res["float64/update/" + o] = d64[o].astype(np.float32)
        flat64 = np.concatenate([d64[o].ravel() for o in trainable])
        summary = {}
        for mode in ("bf16", "fp16"):
            dists, errs = [], []
            for k, perturb in enumerate([None] + list(range(1, RUNS))):
                if spread_only and k == 0:
                    dists.append(float(np.mean(np.abs(res[mode + "/losses"] - l64))))
                    errs.append(float(res[mode + "/update_err"]))
                    continue
                losses, trained, scales = run(model, feed, labels, axis, lr, mode, perturb)
                d = onnx_update(trained)
                flat = np.concatenate([d[o].ravel() for o in trainable])
                errs.append(float(np.linalg.norm(flat - flat64) / np.linalg.norm(flat64)))
                dists.append(float(np.mean(np.abs(losses - l64))))
                if k == 0:
                    res[mode + "/losses"] = losses
                    if scales:
                        res[mode + "/scales"] = np.array(scales, np.float64)
                print("%s %s run %d: mean |loss - float64| %.3e, update err %.3e%s" % (
                    name, mode, k, dists[-1], errs[-1],
                    ", %d skipped steps" % sum(1 for a, b in zip(scales, scales[1:]) if b < a) if scales else ""))
            res.pop(mode + "/update_err", None)
            res[mode + "/loss_dists"] = np.array(dists)
            res[mode + "/update_errs"] = np.array(errs)
            summary[mode] = dict(mean_loss_diff=dists, update_err=errs)
        np.savez_compressed(os.path.join(HERE, name + ".npz"), **res)
        entry = manifest.get(name, {})
        if name == "gpt":
            flags = ["--loss", "cross_entropy"]
        else:
            zoo = json.load(open(os.path.join(REPO, "test", "zoo", "zoo.json")))
            flags = next(e["flags"] for e in zoo["files"] if e["file"] == name)
        entry.update(chaotic=MODELS[name].get("chaotic", False))
        entry.update(onnx=os.path.relpath(onnx_path, REPO), flags=flags, lr=lr, steps=STEPS, trainable=trainable,
                     inputs=list(feed), torch=torch.__version__, autocast=summary,
                     float64_losses=[float(l64[0]), float(l64[-1])])
        manifest[name] = entry
        with open(manifest_path, "w") as f:
            json.dump(manifest, f, indent=1, sort_keys=True)
            f.write("\n")


if __name__ == "__main__":
    main()
