# Run-time index ops end to end: a tiny PyTorch classifier whose features go through
# torch.topk, cumsum, argmax, integer %, gather (indices computed at run time), scatter_add
# and prod, exported by torch.onnx at opset 17 (TopK, CumSum, ArgMax, Mod, GatherElements,
# ScatterElements with reduction "add", ReduceProd), built and trained by ortc for a few
# SGD steps on the CPU target and judged against PyTorch's float64 run with its float32 run
# as the yardstick (ortc_testlib.check_oracle): every step's loss and every parameter's
# update, so each op's gradient rule and CPU kernel are checked in a real training step.
import unittest

import numpy as np
import torch
from torch import nn

from ortc_testlib import check_sgd_vs_torch

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
        check_sgd_vs_torch(self, model, x, labels, STEPS, LR, "index ops",
                           expect_ops=("TopK", "CumSum", "ArgMax", "Mod", "GatherElements",
                                       "ScatterElements", "ReduceProd"))


if __name__ == "__main__":
    unittest.main()
