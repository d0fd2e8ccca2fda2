# 16-bit floats as storage between Casts (the first piece of mixed precision, issue 26): a
# PyTorch classifier whose hidden activations round-trip through float16 and bfloat16
# (`h.to(torch.float16).to(h.dtype)`: ONNX Cast pairs, whose gradients round the same way),
# built and trained by ortc for a few SGD steps on the CPU target and judged against
# PyTorch's float64 run with its float32 run as the yardstick (ortc_testlib.check_oracle). The
# roundings are large (float16 keeps 11 bits, bfloat16 8), so a conversion that rounds
# otherwise than PyTorch's shows in every loss. ortc-eval's float64 forward rounds where the
# graph casts (the reference evaluator remains the oracle). Computing in 16 bits and 16-bit
# inputs are refused with the node named. (The GPU targets: test/gpu/emu/test_emu.py.)
import os
import subprocess
import unittest

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper, numpy_helper
from torch import nn

from ortc_testlib import ENV, ORTC, TempDir, check_sgd_vs_torch, run

STEPS, LR = 4, 0.2
BATCH, INPUT, HIDDEN, CLASSES = 6, 5, 16, 3


class CastNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(INPUT, HIDDEN)
        self.fc2 = nn.Linear(HIDDEN, HIDDEN)
        self.fc3 = nn.Linear(HIDDEN, CLASSES)

    def forward(self, x):
        h = self.fc1(x)
        h = torch.relu(h.to(torch.float16).to(h.dtype))
        h = self.fc2(h * 3.0)
        return self.fc3(torch.tanh(h.to(torch.bfloat16).to(h.dtype)))


def cast_model(path, to, between=None):
    """x -> Cast(to) [-> between] -> Cast(float) -> y, for the error cases."""
    nodes = [helper.make_node("Cast", ["x"], ["h"], to=to)]
    last = "h"
    if between:
        nodes.append(helper.make_node(between, ["h", "h"], ["h2"]))
        last = "h2"
    nodes.append(helper.make_node("Cast", [last], ["y0"], to=TensorProto.FLOAT))
    w = numpy_helper.from_array(np.ones((4, 2), np.float32), "w")
    nodes.append(helper.make_node("MatMul", ["y0", "w"], ["y"], name="mm"))
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 2])], [w])
    for n in g.node:
        n.name = n.name or n.op_type.lower() + "_" + str(list(g.node).index(n))
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)


class SixteenBitCasts(unittest.TestCase):
    def test_trains_as_pytorch_rounds(self):
        torch.manual_seed(0)
        model = CastNet()
        rng = np.random.RandomState(0)
        # Values that round visibly: float16 has an 11-bit significand, bfloat16 an 8-bit one.
        x = (rng.randn(BATCH, INPUT) * 3).astype(np.float32)
        labels = rng.randint(0, CLASSES, size=BATCH).astype(np.int64)
        check_sgd_vs_torch(self, model, x, labels, STEPS, LR, "16-bit casts", expect_ops=("Cast",))

    def test_evaluator_rounds_where_the_graph_casts(self):
        with TempDir() as d:
            for to, dtype in ((TensorProto.FLOAT16, torch.float16), (TensorProto.BFLOAT16, torch.bfloat16)):
                model = os.path.join(d, "m.onnx")
                cast_model(model, to)
                x = np.array([[1 + 2**-12, 1 + 3 * 2**-9, 70000.0, 2**-20],
                              [-1 - 2**-12, 65519.0, 65520.0, 1e-8],
                              [3.14159, -2.71828, 1 + 2**-8, 1 + 3 * 2**-8]], np.float32)
                np.savez(os.path.join(d, "in.npz"), x=x)
                out = os.path.join(d, "out.npz")
                run([os.path.join(os.path.dirname(ORTC), "..", "ortc-eval", "ortc-eval"), model,
                     "--inputs", os.path.join(d, "in.npz"), "-o", out])
                want = torch.from_numpy(x).double().to(dtype).double() @ torch.ones(4, 2, dtype=torch.float64)
                np.testing.assert_array_equal(np.load(out)["y"], want.numpy(), str(dtype))

    def test_refusals_name_the_node(self):
        with TempDir() as d:
            model = os.path.join(d, "add.onnx")
            cast_model(model, TensorProto.FLOAT16, between="Add")
            p = subprocess.run([ORTC, "build", model, "-o", os.path.join(d, "a.ortc")], capture_output=True,
                               text=True, env=ENV)
            self.assertEqual(p.returncode, 1, p.stderr)
            self.assertIn("computes in float16: 16-bit floats are storage between Casts (float32 compute)", p.stderr)
            self.assertFalse(os.path.exists(os.path.join(d, "a.ortc")))
            m = onnx.load(model)  # a float16 input
            m.graph.input[0].type.tensor_type.elem_type = TensorProto.FLOAT16
            del m.graph.node[0]
            m.graph.node[0].input[0] = "x"
            m.graph.node[0].input[1] = "x"
            onnx.save(m, model)
            p = subprocess.run([ORTC, "build", model, "-o", os.path.join(d, "b.ortc")], capture_output=True,
                               text=True, env=ENV)
            self.assertEqual(p.returncode, 1, p.stderr)
            self.assertIn("input 'x' is float16: ortc trains models whose inputs and weights are float32",
                          p.stderr)


if __name__ == "__main__":
    unittest.main()
