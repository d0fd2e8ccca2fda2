# ONNX LSTM and GRU end to end: tiny PyTorch sequence classifiers (nn.LSTM / nn.GRU, batch
# first, one layer, uni- and bidirectional; the last step's output -> Linear -> 3 classes)
# exported by torch.onnx at opset 17, built and trained by ortc for a few SGD steps, and judged
# against PyTorch's float64 run with its float32 run as the yardstick
# (ortc_testlib.check_oracle): the loss at every step and every parameter's update. The
# exporter keeps PyTorch's parameter names (it reorders the gates with Slice/Concat nodes
# inside the graph), so ortc's saved parameters compare with PyTorch's by name. GRU exports
# with linear_before_reset=1 and bidirectional models with direction="bidirectional", so
# this covers both, the reverse direction and the gradients through every gate.
import unittest

import numpy as np
import torch
from torch import nn

from ortc_testlib import check_sgd_vs_torch

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
        what = "%s%s" % (cell.__name__, "/bidirectional" if bidirectional else "")
        check_sgd_vs_torch(self, model, x, labels, STEPS, LR, what)

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
