#!/usr/bin/env python3
# Why this exists: ortc claims that compiling the whole training step ahead of time beats running
# it through a framework. This script checks that claim on the CPU for the four samples. It trains
# each sample with AdamW in ortc, in PyTorch eager mode and in ONNX Runtime Training, all with the
# same batch, the same thread count and one machine, and prints step times, peak RSS and ortc's
# build time side by side. It reports measurements only and asserts nothing. See bench/README.md.
#
#   .venv/bin/python bench/bench_cpu.py [--samples mlp cnn gpt2 bert] [--batch 4] [--threads 2]
#                                       [--warmup 10] [--steps 200] [--markdown]
#
# PyTorch and ONNX Runtime each run in their own child process (this script with --worker), so
# each peak RSS belongs to one framework only.
import argparse, json, os, re, shutil, statistics, subprocess, sys, tempfile, time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLES_DIR = os.path.join(REPO, 'samples')
NAMES = ('mlp', 'cnn', 'gpt2', 'bert')
LR, WEIGHT_DECAY = 1e-3, 0.01  # AdamW; betas (0.9, 0.999) and eps 1e-8 everywhere


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description='CPU training-step benchmark: ortc vs PyTorch eager vs ONNX Runtime Training')
    ap.add_argument('--samples', nargs='+', choices=NAMES, default=list(NAMES))
    ap.add_argument('--batch', type=int, default=4)
    ap.add_argument('--threads', type=int, default=2)
    ap.add_argument('--warmup', type=int, default=10, help='steps left out of the median')
    ap.add_argument('--steps', type=int, default=200, help='timed steps after the warm-up')
    ap.add_argument('--markdown', action='store_true', help='print the table as markdown')
    ap.add_argument('--ortc', default=os.path.join(REPO, 'build/tools/ortc/ortc'))
    ap.add_argument('--ortc-run', default=os.path.join(REPO, 'build/runtime/ortc-run'))
    ap.add_argument('--workdir', help='keep artifacts, feeds and logs here (default: a temporary folder, removed)')
    ap.add_argument('--worker', choices=['torch', 'ort'], help=argparse.SUPPRESS)  # child-process mode
    ap.add_argument('--spec', help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def thread_env(threads):
    """Environment for every child: OpenMP (ortc kernels, torch) and OpenBLAS use `threads` threads."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads))
    env.pop('ORTC_KERNEL_CACHE', None)  # a cached kernels.so would skip the C++ compile we time
    return env


def median_after_warmup(times_ms, warmup):
    timed = times_ms[warmup:]
    if not timed:
        raise RuntimeError('no steps after the warm-up')
    return statistics.median(timed)


def last_json_line(text):
    """The worker's result: the last stdout line that parses as a JSON object."""
    for line in reversed(text.splitlines()):
        if line.startswith('{'):
            return json.loads(line)
    raise RuntimeError('no result line')


def short_error(proc_or_text):
    text = proc_or_text if isinstance(proc_or_text, str) else (proc_or_text.stderr or '') + (proc_or_text.stdout or '')
    lines = [l.strip() for l in text.strip().splitlines() if l.strip()]
    return lines[-1][:300] if lines else 'failed without a message'


# ---------------------------------------------------------------------------------------------
# Inputs shared by the three frameworks

def prepare_sample(name, batch, workdir):
    """Writes the feed (inputs + labels, numpy RandomState(0)) and a spec the workers read."""
    sys.path.insert(0, SAMPLES_DIR)
    import numpy as np, torch
    import common
    mod, _, mapping, params = common.model_from_onnx(name, dtype=torch.float32)
    feed_path = os.path.join(workdir, name + '_feed.npz')
    np.savez(feed_path, **common.make_batch(mod, np.random.RandomState(0), batch))
    spec = dict(name=name, onnx=common.onnx_path(name), feed=feed_path, workdir=workdir,
                trainable=[mapping[p] for p in params], inputs=list(mod.INPUTS),
                num_classes=mod.NUM_CLASSES, seq_labels=bool(getattr(mod, 'SEQ_LABELS', False)))
    spec_path = os.path.join(workdir, name + '_spec.json')
    with open(spec_path, 'w') as f:
        json.dump(spec, f)
    return spec, spec_path


# ---------------------------------------------------------------------------------------------
# ortc

def measure_ortc_build(args, spec, env):
    """`ortc build --timing`: wall time of the whole command, and the package phase (C++ compile)."""
    art = os.path.join(spec['workdir'], spec['name'] + '.ortc')
    shutil.rmtree(art, ignore_errors=True)
    cmd = [args.ortc, 'build', spec['onnx'], '-o', art, '--dim', 'batch=%d' % args.batch,
           '--optimizer', 'adamw', '--weight-decay', str(WEIGHT_DECAY), '--timing']
    t0 = time.perf_counter()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall_s = time.perf_counter() - t0
    if p.returncode != 0:
        raise RuntimeError('ortc build: ' + short_error(p))
    m = re.search(r'codegen: ([\d.]+) ms, package \(C\+\+ compile included\): ([\d.]+) ms', p.stderr)
    if not m:
        raise RuntimeError('ortc build --timing printed no codegen/package line')
    return dict(artifact=art, build_s=wall_s, compile_s=float(m.group(2)) / 1e3, codegen_ms=float(m.group(1)))


def measure_ortc_step(args, spec, artifact, env):
    """`ortc-run train` under /usr/bin/time -v: median step time_ms after warm-up, peak RSS."""
    if not os.path.exists('/usr/bin/time'):
        raise RuntimeError('/usr/bin/time is missing (apt-get install time)')
    log = os.path.join(spec['workdir'], spec['name'] + '_ortc_log.jsonl')
    cmd = ['/usr/bin/time', '-v', args.ortc_run, 'train', artifact, '--data', spec['feed'],
           '--steps', str(args.warmup + args.steps), '--lr', str(LR), '--log-json', log]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError('ortc-run train: ' + short_error(p))
    with open(log) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    rss = re.search(r'Maximum resident set size \(kbytes\): (\d+)', p.stderr)
    return dict(ms=median_after_warmup([r['time_ms'] for r in rows], args.warmup),
                rss_kb=int(rss.group(1)) if rss else None, loss_1=rows[0]['loss'], loss_last=rows[-1]['loss'])


# ---------------------------------------------------------------------------------------------
# PyTorch eager and ONNX Runtime Training: each in a child process (run_worker), whose peak RSS
# is its own ru_maxrss

def run_worker(kind, args, spec_path, env):
    cmd = [sys.executable, os.path.abspath(__file__), '--worker', kind, '--spec', spec_path,
           '--threads', str(args.threads), '--warmup', str(args.warmup), '--steps', str(args.steps)]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(short_error(p))
    return last_json_line(p.stdout)


def worker_result(times_s, warmup, losses, **extra):
    import resource
    return dict(ms=median_after_warmup([t * 1e3 for t in times_s], warmup), loss_1=losses[0],
                loss_last=losses[-1], rss_kb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, **extra)


def torch_worker(args, spec):
    """PyTorch eager, train mode (dropout on), AdamW; times zero_grad+forward+loss+backward+step."""
    sys.path.insert(0, SAMPLES_DIR)
    import numpy as np, torch
    import torch.nn.functional as F
    import common
    torch.set_num_threads(args.threads)
    mod, model, _, _ = common.model_from_onnx(spec['name'], spec['onnx'], torch.float32)
    model.train()
    feed = dict(np.load(spec['feed']))
    inputs = [common.to_torch(feed[n]) for n in spec['inputs']]
    labels = common.to_torch(feed['labels']).reshape(-1)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)
    times, losses = [], []
    for _ in range(args.warmup + args.steps):
        t0 = time.perf_counter()
        logits = model(*inputs)
        loss = F.cross_entropy(logits.reshape(-1, spec['num_classes']), labels)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - t0)
        losses.append(loss.item())  # outside the timed region
    return worker_result(times, args.warmup, losses, threads=torch.get_num_threads())


def ort_training_model(spec):
    """The sample's graph, adapted where ORT Training 1.19 needs it (see bench/README.md)."""
    import numpy as np, onnx
    proto = onnx.load(spec['onnx'])
    g = proto.graph
    # ORT's LayerNormalizationGrad reads the optional Mean/InvStdDev outputs, which torch's
    # export leaves unnamed: name them (the forward result is unchanged).
    for k, node in enumerate(g.node):
        if node.op_type == 'LayerNormalization':
            while len(node.output) < 3:
                node.output.append('bench_ln%d_out%d' % (k, len(node.output)))
    # SoftmaxCrossEntropyLoss takes classes on axis 1: flatten [B,T,V] logits to [B*T,V].
    if spec['seq_labels']:
        out = g.output[0].name
        g.initializer.append(onnx.numpy_helper.from_array(np.array([-1, spec['num_classes']], np.int64), 'bench_2d'))
        g.node.append(onnx.helper.make_node('Reshape', [out, 'bench_2d'], [out + '_2d']))
        del g.output[:]
        g.output.append(onnx.helper.make_tensor_value_info(out + '_2d', onnx.TensorProto.FLOAT, ['n', spec['num_classes']]))
    return proto


def ort_wrong_gradients(proto):
    """Why ORT Training 1.19 would train this graph wrongly, or None. Its BatchNormalization
    gradient reads outputs 3-4 (saved mean, saved inv std) that only the old 5-output op had;
    opset 15+ allows 3 outputs, and the gradients then come out wrong (checked against torch)."""
    for node in proto.graph.node:
        training = any(a.name == 'training_mode' and a.i for a in node.attribute)
        if node.op_type == 'BatchNormalization' and training and len(node.output) < 5:
            return ("ORT's BatchNormalizationGrad needs the saved mean/inv-std outputs that "
                    'opset-15 BatchNormalization lacks: wrong gradients')
    return None


def ort_worker(args, spec):
    """ORT Training: generate_artifacts (CrossEntropyLoss, AdamW), then Module + Optimizer;
    times module(*inputs) (forward+backward) + optimizer.step() + lazy_reset_grad()."""
    import numpy as np, onnx
    import onnxruntime as ort
    from onnxruntime.training import artifacts, onnxblock, api
    proto = ort_training_model(spec)
    frozen = [i.name for i in proto.graph.initializer if i.name not in spec['trainable']]
    d = os.path.join(spec['workdir'], spec['name'] + '_ort')
    os.makedirs(d, exist_ok=True)
    t0 = time.perf_counter()
    artifacts.generate_artifacts(proto, requires_grad=spec['trainable'], frozen_params=frozen,
                                 loss=artifacts.LossType.CrossEntropyLoss,
                                 optimizer=onnxblock.optim.AdamW(eps=1e-8, weight_decay=WEIGHT_DECAY),
                                 artifact_directory=d)
    gen_s = time.perf_counter() - t0
    # The optimizer graph is written with the onnx package's IR version (14 for onnx 1.23), above
    # what ORT 1.19 loads (10); it uses nothing newer, so label it 10.
    opt_path = os.path.join(d, 'optimizer_model.onnx')
    opt_model = onnx.load(opt_path)
    opt_model.ir_version = min(opt_model.ir_version, 10)
    onnx.save(opt_model, opt_path)
    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = args.threads, 1
    state = api.CheckpointState.load_checkpoint(os.path.join(d, 'checkpoint'))
    # No eval model: it is not timed, and ORT rejects the cnn one (3-output BatchNormalization
    # with training_mode switched off).
    module = api.Module(os.path.join(d, 'training_model.onnx'), state, None, session_options=so)
    optimizer = api.Optimizer(opt_path, module)
    optimizer.set_learning_rate(LR)
    feed = dict(np.load(spec['feed']))
    feed['labels'] = feed['labels'].reshape(-1) if spec['seq_labels'] else feed['labels']
    inputs = [feed[n] for n in module.input_names()]
    module.train()
    times, losses = [], []
    for _ in range(args.warmup + args.steps):
        t0 = time.perf_counter()
        loss = module(*inputs)
        optimizer.step()
        module.lazy_reset_grad()
        times.append(time.perf_counter() - t0)
        losses.append(float(loss))
    return worker_result(times, args.warmup, losses, generate_s=gen_s, wrong=ort_wrong_gradients(proto))


def worker_main(args):
    with open(args.spec) as f:
        spec = json.load(f)
    result = (torch_worker if args.worker == 'torch' else ort_worker)(args, spec)
    print(json.dumps(result))


# ---------------------------------------------------------------------------------------------
# Driver and table

def cell(results, key, fn):
    """Runs one measurement; a failure becomes an error string in that cell only."""
    try:
        results[key] = fn()
    except Exception as e:  # noqa: BLE001 - every failure is reported, none aborts the run
        results[key] = 'error: %s' % (str(e).strip().splitlines() or [type(e).__name__])[-1]
    return results[key]


def bench_sample(args, name, workdir, env):
    res = {}
    spec = cell(res, 'spec', lambda: prepare_sample(name, args.batch, workdir))
    if isinstance(spec, str):
        return dict(build=spec, ortc=spec, torch=spec, ort=spec)
    spec, spec_path = spec
    build = cell(res, 'build', lambda: measure_ortc_build(args, spec, env))
    if isinstance(build, str):
        res['ortc'] = build
    else:
        cell(res, 'ortc', lambda: measure_ortc_step(args, spec, build['artifact'], env))
    cell(res, 'torch', lambda: run_worker('torch', args, spec_path, env))
    ort = cell(res, 'ort', lambda: run_worker('ort', args, spec_path, env))
    if isinstance(ort, str):
        res['ort'] = ort.replace('error:', 'n/a:', 1)  # ORT cannot train this sample
    elif ort.get('wrong'):  # it ran, but not the same training step: no comparable time
        res['ort'] = 'n/a: %s (its step took %.3f ms)' % (ort['wrong'], ort['ms'])
    return res


def fmt_ms(r):
    return '%.3f' % r['ms'] if isinstance(r, dict) else 'n/a' if r.startswith('n/a') else 'error'


def fmt_ratio(other, ortc):
    ok = isinstance(other, dict) and isinstance(ortc, dict) and ortc['ms'] > 0
    return '%.2fx' % (other['ms'] / ortc['ms']) if ok else '-'


def fmt_rss(r):
    return '%.1f MB' % (r['rss_kb'] / 1024) if isinstance(r, dict) and r.get('rss_kb') else '-'


def fmt_build(b):
    return '%.2f (%.2f)' % (b['build_s'], b['compile_s']) if isinstance(b, dict) else 'error'


HEADER = ['sample', 'ortc ms/step', 'torch ms/step', 'ORT ms/step', 'torch/ortc', 'ORT/ortc',
          'ortc peak RSS', 'torch peak RSS', 'ortc build s (compile s)']


def table_rows(all_results):
    for name, r in all_results.items():
        yield [name, fmt_ms(r['ortc']), fmt_ms(r['torch']), fmt_ms(r['ort']), fmt_ratio(r['torch'], r['ortc']),
               fmt_ratio(r['ort'], r['ortc']), fmt_rss(r['ortc']), fmt_rss(r['torch']), fmt_build(r['build'])]


def print_table(all_results, markdown):
    rows = list(table_rows(all_results))
    if markdown:
        print('| ' + ' | '.join(HEADER) + ' |')
        print('|' + '|'.join(['---'] + ['---:'] * (len(HEADER) - 1)) + '|')
        for row in rows:
            print('| ' + ' | '.join(row) + ' |')
        return
    widths = [max(len(x) for x in col) for col in zip(HEADER, *rows)]
    for row in [HEADER] + rows:
        print('  '.join(x.ljust(w) if i == 0 else x.rjust(w) for i, (x, w) in enumerate(zip(row, widths))))


def print_details(all_results):
    """Losses (a sanity check that the three train the same thing) and the cell errors."""
    print()
    for name, r in all_results.items():
        parts = []
        for key in ('ortc', 'torch', 'ort'):
            if isinstance(r[key], dict):
                parts.append('%s loss %.4f -> %.4f' % (key, r[key]['loss_1'], r[key]['loss_last']))
        if isinstance(r['ort'], dict):
            parts.append('ORT peak RSS %s, generate_artifacts %.2f s' % (fmt_rss(r['ort']), r['ort']['generate_s']))
        if isinstance(r['build'], dict):
            parts.append('ortc codegen %.1f ms' % r['build']['codegen_ms'])
        print('%s: %s' % (name, '; '.join(parts)))
        for key in ('build', 'ortc', 'torch', 'ort'):
            if isinstance(r[key], str):
                print('%s: %s %s' % (name, key, r[key]))


def machine():
    """nproc, CPU model and load average: the numbers mean little without them."""
    model = '?'
    try:
        with open('/proc/cpuinfo') as f:
            model = next((l.split(':', 1)[1].strip() for l in f if l.startswith('model name')), '?')
        with open('/proc/loadavg') as f:
            load = ' '.join(f.read().split()[:3])
    except OSError:
        load = '?'
    return '%d CPUs (%s), load average %s' % (os.cpu_count(), model, load)


def main():
    args = parse_args()
    if args.worker:
        return worker_main(args)
    env = thread_env(args.threads)
    started_on = machine()
    workdir = args.workdir or tempfile.mkdtemp(prefix='ortc-bench-')
    os.makedirs(workdir, exist_ok=True)
    try:
        results = {name: bench_sample(args, name, workdir, env) for name in args.samples}
    finally:
        if not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    print('batch %d, %d threads, AdamW lr %g wd %g, median of %d steps after %d warm-up; ratios > 1: ortc is faster'
          % (args.batch, args.threads, LR, WEIGHT_DECAY, args.steps, args.warmup))
    print('machine: %s at the start, %s at the end' % (started_on, machine().split('load average ')[1]))
    print()
    print_table(results, args.markdown)
    print_details(results)
    # ORT "n/a" is a finding, not a failure; any other error cell makes the exit status 1.
    failed = any(isinstance(r[k], str) and r[k].startswith('error') for r in results.values() for k in r)
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
