#!/usr/bin/env python3
"""Build-time benchmark: how long `ortc build` takes at real model sizes.

Why: CI pipelines precompile training graphs with `ortc build`, so the compiler's own
speed is a feature (issue: build time at real size). For each model this exports the
ONNX once (Debian's torch 1.13, opset 17, training mode, the same export as
bench_cpu.py) and times, each in a fresh process:

  - a cold CPU build (empty kernel cache), then the same build again with the cache warm,
    and (GPTs) a build of the same model with one layer's MLP narrowed, on the cache a cold
    build leaves; each --repeat times (default 5, the median reported: the VM's disk makes
    single builds vary by 2x);
  - a cold CUDA build (sm_80,sm_90), when nvcc is at /usr/local/cuda/bin;

and reports what `ortc build --timing` says of itself: import, codegen and package
times, the step's launches and distinct kernels, the size of kernels.so and the ortc
process's own peak RSS (child compilers not counted). Not a test: it prints a table.

  .venv/bin/python bench/bench_build.py                  # GPT-2-124M, BERT-base, ResNet-50
  .venv/bin/python bench/bench_build.py --models gpt2-124m --no-cuda
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import bench_cpu  # noqa: E402  (the model builders and the training-mode export)

MODELS = {
    'gpt2-124m': dict(family='gpt', vocab=50257, d=768, heads=12, layers=12, seq=128, batch=1,
                      optimizer='adamw', weight_decay=0.01),
    'bert-base': dict(family='bert', vocab=30522, d=768, heads=12, layers=12, seq=128, batch=1,
                      optimizer='adamw', weight_decay=0.01),
    'resnet50-224': dict(family='resnet50', size=224, classes=1000, batch=1, optimizer='sgd',
                         momentum=0.9),
}
NVCC = '/usr/local/cuda/bin/nvcc'


def resnet50_model(cfg):
    """torchvision's resnet50 (BatchNorm in training mode), cfg['size'] square RGB input."""
    import types
    import torchvision
    common = bench_cpu.samples_common()
    mod = types.SimpleNamespace(
        INPUTS=['input'], NUM_CLASSES=cfg['classes'],
        Model=lambda: torchvision.models.resnet50(num_classes=cfg['classes']),
        random_inputs=lambda rng, batch: {'input': rng.randn(batch, 3, cfg['size'], cfg['size']).astype('float32')})
    return mod, common.build(mod)


bench_cpu.BUILDERS['resnet50'] = resnet50_model


def export(name, cfg, workdir, one_layer_narrower=False):
    """The model's ONNX; with one_layer_narrower (GPTs), the same model whose middle block has
    an MLP of half the width: the edit a user makes between two builds."""
    path = os.path.join(workdir, name + ('-edited' if one_layer_narrower else '') + '.onnx')
    if not os.path.exists(path):
        import torch
        import torch.nn as nn
        mod, model = bench_cpu.BUILDERS[cfg['family']](cfg)
        if one_layer_narrower:
            torch.manual_seed(1)
            mlp = model.blocks[len(model.blocks) // 2].mlp
            mlp[0], mlp[2] = nn.Linear(cfg['d'], 2 * cfg['d']), nn.Linear(2 * cfg['d'], cfg['d'])
        bench_cpu.samples_common().export_training(mod, model, path, batch=cfg['batch'])
    return path


def build(args, onnx_path, out, cache, target):
    """One `ortc build --timing` in its own process; returns what it measured. Each build starts
    with no dirty page cache behind it (os.sync): otherwise a build pays for writing back the
    previous build's 0.5 GB params.bin (seen: a rebuild of GPT-2-124M 0.9 s after a sync, 1.7-2.4 s
    right after two builds), and which build pays depends on the kernel's writeback timer."""
    shutil.rmtree(out, ignore_errors=True)
    os.sync()
    cfg_flags = ['--dim', 'batch=%d' % args.cfg['batch']] + bench_cpu.optimizer_flags(args.cfg)
    cmd = [args.ortc, 'build', onnx_path, '-o', out, '--timing', '--target', target] + cfg_flags
    env = dict(os.environ, ORTC_KERNEL_CACHE=cache)
    t0 = time.perf_counter()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.timeout)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise RuntimeError('ortc build --target %s: %s' % (target, p.stderr.strip()[-400:]))
    num = lambda pattern: float(re.search(pattern, p.stderr).group(1))  # noqa: E731
    return dict(
        wall_s=wall,
        import_s=num(r'ortc: import: ([\d.]+) ms') / 1e3,
        codegen_s=num(r'codegen: ([\d.]+) ms') / 1e3,
        package_s=num(r'package \([^)]*\): ([\d.]+) ms') / 1e3,
        launches=int(num(r'\((?:\d+) tensors, (\d+) launches')),
        distinct=int(num(r'launches of (\d+) distinct kernels')),
        rss_mb=num(r'peak RSS ([\d.]+) MB'),
        so_mb=os.path.getsize(os.path.join(out, 'kernels.so')) / 2**20)


def median(run, n):
    """The run of median wall time among `n` calls of `run` (the others in 'walls_s')."""
    runs = sorted((run() for _ in range(n)), key=lambda b: b['wall_s'])
    pick = dict(runs[len(runs) // 2])
    pick['walls_s'] = [b['wall_s'] for b in runs]
    return pick


def main(argv=None):
    ap = argparse.ArgumentParser(description='ortc build time at real model sizes')
    ap.add_argument('--models', nargs='+', choices=list(MODELS), default=list(MODELS))
    ap.add_argument('--no-cuda', action='store_true', help='skip the CUDA builds')
    ap.add_argument('--ortc', default=os.path.join(REPO, 'build/tools/ortc/ortc'))
    ap.add_argument('--timeout', type=int, default=1800)
    ap.add_argument('--repeat', type=int, default=5,
                    help='CPU builds of each kind, the median reported (CUDA cold: once)')
    ap.add_argument('--workdir', help='keep the exports and artifacts here (default: a temporary folder)')
    args = ap.parse_args(argv)
    cuda = not args.no_cuda and os.path.exists(NVCC)
    workdir = args.workdir or tempfile.mkdtemp(prefix='ortc-bench-build-')
    os.makedirs(workdir, exist_ok=True)
    cpu_model = open('/proc/cpuinfo').read().split('model name')[1].split('\n')[0].strip(': \t')
    print('ortc build on %d CPUs, %s; %s' % (os.cpu_count(), cpu_model, time.strftime('%Y-%m-%d')))
    rows = []
    try:
        for name in args.models:
            args.cfg = MODELS[name]
            t0 = time.perf_counter()
            onnx_path = export(name, args.cfg, workdir)
            print('%s: exported in %.0f s (%.0f MB)' % (name, time.perf_counter() - t0,
                                                         os.path.getsize(onnx_path) / 2**20), flush=True)
            cache = os.path.join(workdir, name + '-cache')
            art = os.path.join(workdir, name + '.ortc')

            def fresh(copy_of=None):
                shutil.rmtree(cache, ignore_errors=True)
                if copy_of:
                    shutil.copytree(copy_of, cache)
                return cache
            r = {'model': name,
                 'cpu cold': median(lambda: build(args, onnx_path, art, fresh(), 'cpu'), args.repeat)}
            snapshot = cache + '-after-cold'  # the cache as one cold build leaves it
            shutil.rmtree(snapshot, ignore_errors=True)
            shutil.copytree(cache, snapshot)
            r['cpu cached'] = median(lambda: build(args, onnx_path, art, cache, 'cpu'), args.repeat)
            if args.cfg['family'] == 'gpt':
                edited = export(name, args.cfg, workdir, one_layer_narrower=True)
                r['cpu, one layer changed'] = median(
                    lambda: build(args, edited, art + '-edited', fresh(snapshot), 'cpu'), args.repeat)
            shutil.rmtree(snapshot, ignore_errors=True)
            if cuda:
                shutil.rmtree(cache + '-cuda', ignore_errors=True)
                r['cuda cold'] = build(args, onnx_path, art + '-cuda', cache + '-cuda', 'cuda')
            rows.append(r)
            print(r, flush=True)
    finally:
        if not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    print()
    print('| model | build | wall s (median; all runs) | import s | codegen s | package s (compile incl.) | launches | distinct kernels '
          '| distinct/launches | kernels.so MB | ortc peak RSS MB |')
    print('|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|')
    for r in rows:
        for kind in ('cpu cold', 'cpu cached', 'cpu, one layer changed', 'cuda cold'):
            if kind in r:
                b = r[kind]
                print('| %s | %s | %.1f%s | %.2f | %.2f | %.2f | %d | %d | %.1f%% | %.1f | %.0f |' % (
                    r['model'], kind, b['wall_s'],
                    ' (%s)' % ', '.join('%.1f' % w for w in b['walls_s']) if 'walls_s' in b else '', b['import_s'], b['codegen_s'], b['package_s'], b['launches'],
                    b['distinct'], 100.0 * b['distinct'] / b['launches'], b['so_mb'], b['rss_mb']))


if __name__ == '__main__':
    main()
