# MLP sample for ortc: Linear(32->64) ReLU Linear(64->64) ReLU Linear(64->10).
# Run `.venv/bin/python samples/mlp/export.py` to rewrite samples/mlp/mlp.onnx (training-mode export).
import os, sys
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import common
import torch.nn as nn

INPUTS, NUM_CLASSES = ['x'], 10


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))

    def forward(self, x):
        return self.net(x)


def random_inputs(rng, batch):
    return {'x': rng.randn(batch, 32).astype('float32')}


if __name__ == '__main__':
    common.export_main(sys.modules[__name__])
