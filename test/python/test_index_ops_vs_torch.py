# Run-time index ops end to end: a tiny PyTorch classifier whose features go through
# torch.topk, cumsum, argmax, integer %, gather (indices computed at run time), scatter_add
# and prod, exported by torch.onnx at opset 17 (TopK, CumSum, ArgMax, Mod, GatherElements,
# ScatterElements with reduction "add", ReduceProd), built and trained by ortc for a few
# SGD steps on the CPU target and judged against PyTorch's float64 run with its float32 run
# as the yardstick (ortc_testlib.check_oracle): every step's loss and every parameter's
# update, so each op's gradient rule and CPU kernel are checked in a real training step.
import json
import os
import unittest
import warnings

import numpy as np
import torch
from torch import nn

from ortc_testlib import ORTC, TempDir, check_oracle, run, torch_sgd_run

STEPS, LR = 4, 0.1
BATCH, INPUT, HIDDEN, CLASSES, K = 5, 6, 8, 3, 3


class IndexNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(INPUT, HIDDEN)
        self.fc2 = nn.Linear(K + K + HIDDEN + HIDDEN // 2, CLASSES)

    def forward(self, x):
        h = torch.tanh(self.fc1(x))
        top, _ = torch.topk(h, K, dim=1)
        c = torch.cumsum(h, dim=1)
        # Indices computed at run time: the argmax and its next K - 1 neighbours, cyclically.
        idx = (h.argmax(dim=1, keepdim=True) + torch.arange(K).unsqueeze(0)) % HIDDEN
        g = torch.gather(c, 1, idx)
        s = torch.zeros_like(h).scatter_add(1, idx, g * top)
        p = torch.prod(1 + 0.5 * h.reshape(-1, HIDDEN // 2, 2), dim=2)
        return self.fc2(torch.cat([top, g, s, p], dim=1))


class IndexOpsVsTorch(unittest.TestCase):
    def test_train(self):
        torch.manual_seed(0)
        model = IndexNet()
        rng = np.random.RandomState(0)
        x = rng.randn(BATCH, INPUT).astype(np.float32)
        labels = rng.randint(0, CLASSES, size=BATCH).astype(np.int64)
        init = {k: v.detach().double().numpy() for k, v in model.named_parameters()}
        losses64, final64 = torch_sgd_run(model, x, labels, torch.float64, STEPS, LR)
        losses32, final32 = torch_sgd_run(model, x, labels, torch.float32, STEPS, LR)
        with TempDir() as d:
            onnx_path = os.path.join(d, "model.onnx")
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                torch.onnx.export(model, torch.from_numpy(x), onnx_path, opset_version=17,
                                  training=torch.onnx.TrainingMode.TRAINING,
                                  do_constant_folding=False, input_names=["x"],
                                  output_names=["logits"])
            import onnx
            ops = {n.op_type for n in onnx.load(onnx_path).graph.node}
            for op in ("TopK", "CumSum", "ArgMax", "Mod", "GatherElements", "ScatterElements",
                       "ReduceProd"):
                self.assertIn(op, ops, "the export has no %s" % op)
            art = os.path.join(d, "m.ortc")
            run([ORTC, "build", onnx_path, "-o", art, "--optimizer", "sgd"])
            np.savez(os.path.join(d, "feed.npz"), x=x, labels=labels)
            log, params = os.path.join(d, "log.jsonl"), os.path.join(d, "p.npz")
            run([ORTC, "train", art, "--data", os.path.join(d, "feed.npz"), "--steps", str(STEPS),
                 "--lr", str(LR), "--log-json", log, "--save-params", params])
            with open(log) as f:
                losses = [json.loads(line)["loss"] for line in f]
            trained = dict(np.load(params))
        self.assertEqual(sorted(trained), sorted(init), "ortc's parameters are not PyTorch's")
        upd = {k: trained[k].astype(np.float64) - init[k] for k in init}
        upd64 = {k: final64[k] - init[k] for k in init}
        upd32 = {k: final32[k] - init[k] for k in init}
        failures, worst = check_oracle(losses, losses64, losses32, upd, upd64, upd32, "index ops")
        print("index ops: worst loss err %.1e (torch f32 %.1e), update err %.1e (torch f32 %.1e)"
              % (worst["loss"], worst["loss32"], worst["update"], worst["update32"]))
        self.assertFalse(failures, "\n".join(failures))


if __name__ == "__main__":
    unittest.main()
