# Sanity check of the checked-in samples: onnx.checker passes, and onnxruntime (batch 4, Dropout
# ratios patched to 0) matches the torch model (train mode, dropout off, float32) within 1e-5.
import os, sys
import numpy as np
import onnx, onnxruntime as ort
import torch
from onnx import numpy_helper
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common

ok = True
for name in sys.argv[1:] or common.NAMES:
    proto = onnx.load(common.onnx_path(name))
    onnx.checker.check_model(proto, full_check=True)
    proto.graph.initializer.append(numpy_helper.from_array(np.array(0.0, np.float32), 'check_zero_ratio'))
    for node in proto.graph.node:
        if node.op_type == 'Dropout':
            node.input[1] = 'check_zero_ratio'
    so = ort.SessionOptions()  # ORT's Conv+BatchNormalization fusion ignores training_mode=1
    so.graph_optimization_level, so.log_severity_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL, 3
    sess = ort.InferenceSession(proto.SerializeToString(), so, providers=['CPUExecutionProvider'])
    mod, model, _, _ = common.model_from_onnx(name, dtype=torch.float32)
    common.set_dropout(model, 0.0)
    feed = mod.random_inputs(np.random.RandomState(1), common.BATCH)
    got = sess.run(['logits'], feed)[0]
    with torch.no_grad():
        want = common.to_numpy(model.train()(*[common.to_torch(feed[n]) for n in mod.INPUTS]))
    err = float(np.abs(got - want).max())
    ok &= got.shape == want.shape and err <= 1e-5
    print('%-5s %s ops=%s logits%s max|ort-torch|=%.2e' % (name, 'ok  ' if err <= 1e-5 else 'FAIL',
          len(proto.graph.node), list(got.shape), err))
sys.exit(0 if ok else 1)
