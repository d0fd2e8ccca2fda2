# ONNX LSTM and GRU end to end: tiny PyTorch sequence classifiers (nn.LSTM / nn.GRU, batch
# first, one layer, uni- and bidirectional; the last step's output -> Linear -> 3 classes)
# exported by torch.onnx at opset 17, built and trained by ortc for a few SGD steps, and judged
# against PyTorch's float64 run with its float32 run as the yardstick
# (ortc_testlib.check_oracle): the loss at every step and every parameter's update. The
# exporter keeps PyTorch's parameter names (it reorders the gates with Slice/Concat nodes
# inside the graph), so ortc's saved parameters compare with PyTorch's by name. GRU exports
# with linear_before_reset=1 and bidirectional models with direction="bidirectional", so
# this covers both, the reverse direction and the gradients through every gate.
import json
import os
import unittest
import warnings

import numpy as np
import torch
from torch import nn

from ortc_testlib import ORTC, TempDir, check_oracle, run, torch_sgd_run

STEPS, LR = 3, 0.1
BATCH, SEQ, INPUT, HIDDEN, CLASSES = 3, 5, 4, 8, 3


class Classifier(nn.Module):
    def __init__(self, cell, bidirectional):
        super().__init__()
        self.rnn = cell(INPUT, HIDDEN, batch_first=True, bidirectional=bidirectional)
        self.fc = nn.Linear(HIDDEN * (2 if bidirectional else 1), CLASSES)

    def forward(self, x):
        y, _ = self.rnn(x)
        return self.fc(y[:, -1, :])


class RnnVsTorch(unittest.TestCase):
    def check(self, cell, bidirectional):
        torch.manual_seed(0)
        model = Classifier(cell, bidirectional)
        rng = np.random.RandomState(0)
        x = rng.randn(BATCH, SEQ, INPUT).astype(np.float32)
        labels = rng.randint(0, CLASSES, size=BATCH).astype(np.int64)
        init = {k: v.detach().double().numpy() for k, v in model.named_parameters()}
        losses64, final64 = torch_sgd_run(model, x, labels, torch.float64, STEPS, LR)
        losses32, final32 = torch_sgd_run(model, x, labels, torch.float32, STEPS, LR)
        what = "%s%s" % (cell.__name__, "/bidirectional" if bidirectional else "")
        with TempDir() as d:
            onnx_path = os.path.join(d, "model.onnx")
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                torch.onnx.export(model, torch.from_numpy(x), onnx_path, opset_version=17,
                                  training=torch.onnx.TrainingMode.TRAINING,
                                  do_constant_folding=False, input_names=["x"],
                                  output_names=["logits"])
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
        failures, worst = check_oracle(losses, losses64, losses32, upd, upd64, upd32, what)
        print("%s: worst loss err %.1e (torch f32 %.1e), update err %.1e (torch f32 %.1e)"
              % (what, worst["loss"], worst["loss32"], worst["update"], worst["update32"]))
        self.assertFalse(failures, "\n".join(failures))

    def test_lstm(self):
        self.check(nn.LSTM, False)

    def test_lstm_bidirectional(self):
        self.check(nn.LSTM, True)

    def test_gru(self):
        self.check(nn.GRU, False)

    def test_gru_bidirectional(self):
        self.check(nn.GRU, True)


if __name__ == "__main__":
    unittest.main()
