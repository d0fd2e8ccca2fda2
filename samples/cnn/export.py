# Small CNN sample for ortc: Conv/BatchNorm(training)/ReLU/MaxPool/AvgPool/Pad/GlobalAveragePool/Linear.
# Run `.venv/bin/python samples/cnn/export.py` to rewrite samples/cnn/cnn.onnx (training-mode export).
import os, sys
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import common
import torch.nn as nn
import torch.nn.functional as F

INPUTS, NUM_CLASSES = ['x'], 10


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.AvgPool2d(2))
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(16, 10)

    def forward(self, x):  # [B,3,16,16] -> [B,16,4,4] -> pad -> [B,16,6,6] -> [B,16,1,1]
        x = F.pad(self.features(x), (1, 1, 1, 1), mode='constant', value=0.5)
        return self.fc(self.pool(x).flatten(1))


def random_inputs(rng, batch):
    return {'x': rng.randn(batch, 3, 16, 16).astype('float32')}


if __name__ == '__main__':
    common.export_main(sys.modules[__name__])
