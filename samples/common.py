# Shared plumbing for the sample models: loading a sample's export.py, seeding, the training-mode
# ONNX export call, deterministic feeds, and loading ONNX initializers back into a torch model.
import argparse, importlib.util, os, sys
import numpy as np
import torch

SAMPLES = os.path.dirname(os.path.abspath(__file__))
NAMES = ('mlp', 'cnn', 'gpt2', 'bert')
BATCH = 4


def to_torch(a):
    """np -> torch; falls back to lists where torch 1.13's numpy bridge fails (numpy 2 in the venv)."""
    try:
        return torch.from_numpy(np.ascontiguousarray(a))
    except RuntimeError:
        dt = {'float32': torch.float32, 'float64': torch.float64, 'int64': torch.int64, 'bool': torch.bool}
        return torch.tensor(a.tolist(), dtype=dt[str(a.dtype)]).reshape(a.shape)


def to_numpy(t):
    t = t.detach().cpu()
    try:
        return t.numpy()
    except RuntimeError:
        return np.array(t.tolist(), dtype=str(t.dtype).replace('torch.', '')).reshape(tuple(t.shape))


def onnx_path(name):
    return os.path.join(SAMPLES, name, name + '.onnx')


def load_sample(name):
    """Imports samples/<name>/export.py (Model, INPUTS, NUM_CLASSES, SEQ_LABELS, random_inputs)."""
    spec = importlib.util.spec_from_file_location('sample_' + name, os.path.join(SAMPLES, name, 'export.py'))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def build(mod, seed=0):
    torch.manual_seed(seed)
    return mod.Model()


def make_batch(mod, rng, batch=BATCH):
    """Numpy feed for one step: every ONNX input plus int64 `labels`."""
    feed = mod.random_inputs(rng, batch)
    shape = (batch, mod.SEQ) if getattr(mod, 'SEQ_LABELS', False) else (batch,)
    feed['labels'] = rng.randint(0, mod.NUM_CLASSES, size=shape).astype(np.int64)
    return feed


def export_main(mod):
    """CLI of every samples/<name>/export.py: builds the seeded model and exports it in training mode."""
    name = os.path.basename(os.path.dirname(os.path.abspath(mod.__file__)))
    ap = argparse.ArgumentParser(description='export the %s sample to ONNX (training mode)' % name)
    ap.add_argument('--out', default=onnx_path(name))
    ap.add_argument('--seed', type=int, default=0)
    a = ap.parse_args()
    export_training(mod, build(mod, a.seed), a.out, a.seed)
    print('wrote %s (%d bytes)' % (a.out, os.path.getsize(a.out)))


def export_training(mod, model, path, seed=0, batch=BATCH):
    """The samples' export: opset 17, TrainingMode.TRAINING, no constant folding, dynamic `batch`
    axis 0 on mod.INPUTS and `logits`, traced on mod.random_inputs(RandomState(seed), batch).
    Also used by bench/bench_cpu.py for its larger configurations of the same models."""
    model = model.train()
    feed = mod.random_inputs(np.random.RandomState(seed), batch)
    args = tuple(to_torch(feed[n]) for n in mod.INPUTS)
    axes = {n: {0: 'batch'} for n in list(mod.INPUTS) + ['logits']}
    before = {k: to_numpy(v).copy() for k, v in model.state_dict().items()}
    torch.onnx.export(model, args, path, opset_version=17, training=torch.onnx.TrainingMode.TRAINING,
                      do_constant_folding=False, input_names=list(mod.INPUTS), output_names=['logits'],
                      dynamic_axes=axes)
    # The export's trace runs one train-mode forward that updates BatchNorm running stats: store
    # the initializers as the model was constructed (running_mean 0, running_var 1).
    import onnx
    from onnx import numpy_helper
    proto = onnx.load(path)
    for i in proto.graph.initializer:
        if i.name in before:
            i.CopyFrom(numpy_helper.from_array(before[i.name].astype(numpy_helper.to_array(i).dtype), i.name))
    onnx.save(proto, path)


def load_onnx_weights(model, proto, seed=0):
    """Copies ONNX initializers into model's parameters/buffers; returns {torch name: onnx name}.
    Matches by name first, then leftovers (e.g. onnx::-named) by shape, preferring equal values to
    the freshly seeded model's, in initializer order. Exits with an error if a parameter is unmatched."""
    from onnx import numpy_helper
    inits = {i.name: numpy_helper.to_array(i) for i in proto.graph.initializer}
    tensors = dict(model.named_parameters())  # tied weights appear once
    params = list(tensors)
    tensors.update((n, b) for n, b in model.named_buffers() if not n.endswith('num_batches_tracked'))
    mapping, free = {}, [n for n in inits]
    for tn, t in tensors.items():
        if tn in inits and tuple(inits[tn].shape) == tuple(t.shape):
            mapping[tn] = tn
            free.remove(tn)
    for tn, t in tensors.items():
        if tn in mapping:
            continue
        same = [o for o in free if tuple(inits[o].shape) == tuple(t.shape)]
        exact = [o for o in same if np.allclose(inits[o], to_numpy(t))]
        if exact or same:
            mapping[tn] = (exact or same)[0]
            free.remove(mapping[tn])
    missing = [n for n in tensors if n not in mapping]
    for n in missing:
        print('error: torch %s %s %s has no ONNX initializer' % ('parameter' if n in params else 'buffer',
              n, tuple(tensors[n].shape)), file=sys.stderr)
    if any(n in params for n in missing):
        sys.exit(1)
    with torch.no_grad():
        for tn, on in mapping.items():
            tensors[tn].copy_(to_torch(np.array(inits[on])).to(tensors[tn].dtype))
    return mapping, inits, params


def set_dropout(model, p):
    for m in model.modules():
        if isinstance(m, torch.nn.Dropout):
            m.p = p


def model_from_onnx(name, path=None, dtype=torch.float64, seed=0):
    """(sample module, torch model with the .onnx initial weights in dtype, {torch: onnx name}, params)."""
    import onnx
    mod = load_sample(name)
    model = build(mod, seed)
    mapping, _, params = load_onnx_weights(model, onnx.load(path or onnx_path(name)), seed)
    return mod, model.to(dtype), mapping, params


def init_normal(model, std=0.02):
    """GPT-2/BERT-style init (N(0, std) Linear/Embedding weights, zero biases): keeps the tied
    LM head's initial logits small, so the reference loss starts near log(vocab)."""
    for m in model.modules():
        if isinstance(m, (torch.nn.Linear, torch.nn.Embedding)):
            torch.nn.init.normal_(m.weight, 0.0, std)
            if getattr(m, 'bias', None) is not None:
                torch.nn.init.zeros_(m.bias)
