# Torch reference numbers for ortc's training-step tests: loss, gradients, BatchNorm stats and
# optimizer trajectories of a sample, starting from the weights stored in its .onnx. See README.md.
import argparse, json, os, sys
import numpy as np
import torch
import torch.nn.functional as F
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common


def parse():
    ap = argparse.ArgumentParser(description='torch reference numbers for an ortc sample (see samples/README.md)')
    ap.add_argument('name', choices=common.NAMES)
    ap.add_argument('seed', type=int, help='seeds the feeds (numpy) and torch dropout RNG')
    ap.add_argument('out', help='output .npz')
    ap.add_argument('--onnx', help='model to take initial weights from (default samples/NAME/NAME.onnx)')
    ap.add_argument('--dtype', choices=['float64', 'float32'], default='float64')
    ap.add_argument('--optimizer', choices=['sgd', 'adamw'], default='sgd')
    ap.add_argument('--steps', type=int, default=0)
    ap.add_argument('--lr', type=float, default=0.01)
    ap.add_argument('--momentum', type=float, default=0.0, help='sgd only')
    ap.add_argument('--weight-decay', type=float, default=0.0)
    ap.add_argument('--no-dropout', action='store_true', help='set every Dropout p to 0')
    ap.add_argument('--batches-per-step', action='store_true',
                    help='a new batch per step, stored as steps/<input> [steps,...]; else every step reuses the first')
    ap.add_argument('--batch', type=int, default=common.BATCH)
    return ap.parse_args()


def fresh(a):
    mod, model, mapping, params = common.model_from_onnx(a.name, a.onnx, getattr(torch, a.dtype))
    if a.no_dropout:
        common.set_dropout(model, 0.0)
    return mod, model.train(), mapping, params


def loss_of(mod, model, feed, dtype):
    args = [common.to_torch(feed[n]) for n in mod.INPUTS]
    args = [t.to(dtype) if t.is_floating_point() else t for t in args]
    logits = model(*args)
    return F.cross_entropy(logits.reshape(-1, mod.NUM_CLASSES), common.to_torch(feed['labels']).reshape(-1))


def main():
    a = parse()
    dtype = getattr(torch, a.dtype)
    mod, model, mapping, params = fresh(a)
    rng = np.random.RandomState(a.seed)
    batches = [common.make_batch(mod, rng, a.batch) for _ in range(max(a.steps, 1) if a.batches_per_step else 1)]
    state = dict(model.state_dict(keep_vars=True))
    stats = [t for t in mapping if t not in params and t.endswith(('running_mean', 'running_var'))]
    res = dict(batches[0])
    if a.batches_per_step:
        res.update(('steps/' + k, np.stack([b[k] for b in batches])) for k in batches[0])
    res.update(('init/' + on, common.to_numpy(state[tn])) for tn, on in mapping.items())

    torch.manual_seed(a.seed)
    loss = loss_of(mod, model, batches[0], dtype)
    loss.backward()
    res['loss_0'] = common.to_numpy(loss)
    res.update(('grad/' + mapping[tn], common.to_numpy(state[tn].grad)) for tn in params)
    res.update(('buffer/' + mapping[tn], common.to_numpy(state[tn])) for tn in stats)

    if a.steps:
        mod, model, mapping, params = fresh(a)
        state = dict(model.state_dict(keep_vars=True))
        ps = [state[tn] for tn in params]
        opt = (torch.optim.SGD(ps, lr=a.lr, momentum=a.momentum, weight_decay=a.weight_decay) if a.optimizer == 'sgd'
               else torch.optim.AdamW(ps, lr=a.lr, weight_decay=a.weight_decay))
        torch.manual_seed(a.seed)
        losses = []
        for i in range(a.steps):
            opt.zero_grad()
            loss = loss_of(mod, model, batches[i % len(batches)], dtype)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        res['losses'] = np.array(losses, dtype=a.dtype)
        res.update(('final/' + mapping[tn], common.to_numpy(state[tn])) for tn in list(params) + stats)
    res['trainable'] = np.array([mapping[tn] for tn in params])
    res['meta'] = np.array(json.dumps(vars(a)))
    np.savez(a.out, **res)
    print('%s: loss_0 %.6f%s -> %s' % (a.name, res['loss_0'], ', losses %s' % np.round(res['losses'], 5).tolist()
                                       if a.steps else '', a.out))


if __name__ == '__main__':
    main()
