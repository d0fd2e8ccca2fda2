#!/usr/bin/env python3
# Why this exists: recompute (ortc build --recompute) trades step time for arena memory, and issue
# 25's targets are about that trade at a size people train: the arena and step time of each policy
# against none (selective; fused, the default; layers; budgets from 100% down to 30% of none's arena: the curve), and the
# largest batch whose train-step arena fits a fixed size without recompute and with a budget of
# that size. Fusion is on for every figure (the default). It reports measurements only.
#
#   .venv/bin/python bench/bench_recompute.py [--models NAME...] [--budgets 90 80 ...] [--threads 2]
#                                             [--fit-mib 256] [--markdown] [--workdir DIR]
#
# Step times: `ortc-run train` at --threads, median of --steps after --warmup (bench_cpu's
# ortc_train), in --rounds rounds that run every artifact in turn, each round starting one later
# (the 2-core machines this runs on swing by 30% between minutes; interleaving keeps the
# comparison fair): the median over rounds, and against none the median of the rounds' ratios.
# Arena and recompute figures: what `ortc build` prints. The batch search builds up to
# the memory plan only (--stop-after schedule).
import argparse, os, re, statistics, subprocess, sys, tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_cpu  # noqa: E402  (models, export, ortc helpers)

ARENA = re.compile(r'memory plan @train_step: arena (\d+) bytes')
RECOMPUTE = re.compile(r'recompute \(\S+\) @train_step: (\d+) values, .*?\+([\d.]+) MFLOP \(([\d.]+)% of the forward')


def parse_args():
    ap = argparse.ArgumentParser(description='Recompute policies: arena vs step time (CPU)')
    ap.add_argument('--models', nargs='+', default=['gpt d256 L6 T128'], metavar='NAME',
                    help='from bench_cpu.MODELS (default: gpt d256 L6 T128)')
    ap.add_argument('--budgets', nargs='+', type=int, default=[90, 80, 70, 60, 50, 40, 30],
                    help='budget=PCT%% policies of the curve (default 90 .. 30)')
    ap.add_argument('--threads', type=int, default=2)
    ap.add_argument('--warmup', type=int, default=3)
    ap.add_argument('--steps', type=int, default=7)
    ap.add_argument('--rounds', type=int, default=3, help='timing rounds over all artifacts (best round counts)')
    ap.add_argument('--fit-mib', type=int, default=256, help='arena size of the batch search (MiB)')
    ap.add_argument('--max-batch', type=int, default=1024)
    ap.add_argument('--timeout', type=int, default=1800)
    bench_cpu.add_tool_args(ap)
    args = ap.parse_args()
    if args.steps < 5:
        ap.error('--steps must be at least 5')
    return args


def build(args, spec, policy, batch, out=None):
    """ortc build with --recompute POLICY: (arena bytes, recompute line groups or None), or the
    error's last line; without `out` it stops after the memory plan."""
    cmd = [args.ortc, 'build', spec['onnx'], '--dim', 'batch=%d' % batch, '--recompute', policy] + \
        bench_cpu.optimizer_flags(spec['cfg'])
    cmd += ['-o', out] if out else ['--stop-after', 'schedule', '--emit-file',
                                    os.path.join(spec['workdir'], 'planned.mlir')]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, env=bench_cpu.thread_env(1))
    if p.returncode:
        return p.stderr.strip().splitlines()[-1] if p.stderr.strip() else 'exit %d' % p.returncode
    m, r = ARENA.search(p.stderr), RECOMPUTE.search(p.stderr)
    return int(m.group(1)), (r.groups() if r else None)


def largest_batch(args, spec, policy):
    """The largest batch (doubling, then bisection) whose build with `policy` succeeds and plans an
    arena of at most --fit-mib."""
    limit = args.fit_mib << 20
    fits = lambda b: not isinstance(got := build(args, spec, policy, b), str) and got[0] <= limit
    if not fits(1):
        return 0
    lo, hi = 1, 2
    while hi <= args.max_batch and fits(hi):
        lo, hi = hi, hi * 2
    hi = min(hi, args.max_batch + 1)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


def main():
    args = parse_args()
    workdir = args.workdir or tempfile.mkdtemp(prefix='ortc-bench-recompute-')
    os.makedirs(workdir, exist_ok=True)
    lines = []
    for name in args.models:
        cfg = bench_cpu.MODELS[name]
        spec, _ = bench_cpu.prepare_model(name, cfg, workdir)
        built = []
        for policy in ['none', 'selective', 'fused', 'layers'] + ['budget=%d%%' % b for b in args.budgets]:
            art = os.path.join(workdir, '%s-%s.ortc' % (spec['slug'], re.sub(r'[^a-z0-9]+', '', policy)))
            built.append((policy, art, build(args, spec, policy, cfg['batch'], art)))
        # Rounds over all artifacts in turn, so that a slow spell of the machine hits them alike,
        # each round starting one artifact later (no policy always runs first). An artifact's time
        # is the median of its rounds' medians; its ratio to none the median of the rounds'
        # ratios (none and the policy measured minutes apart at most).
        ms, losses = {}, {}
        runnable = [(policy, art) for policy, art, got in built if not isinstance(got, str)]
        for r in range(args.rounds):
            for policy, art in runnable[r % len(runnable):] + runnable[:r % len(runnable)]:
                t = bench_cpu.ortc_train(args, art, spec['feed'], cfg['lr'], args.threads,
                                         os.path.join(workdir, 'train.jsonl'))
                ms.setdefault(policy, [None] * args.rounds)[r] = t['ms']
                losses[policy] = (t['loss_1'], t['loss_last'])
        ratio = {p: statistics.median(a / b for a, b in zip(ms[p], ms['none'])) for p in ms}
        ms = {p: statistics.median(v) for p, v in ms.items()}
        rows, base = [], None
        for policy, art, got in built:
            if isinstance(got, str):
                rows.append([policy, 'n/a (%s)' % got[:200], '', '', '', ''])
                continue
            arena, rc = got
            base = base or (arena, ms[policy])
            rows.append([policy, '%.1f (%.0f%%)' % (arena / 2**20, 100.0 * arena / base[0]),
                         '%.2f (%+.1f%%)' % (ms[policy], 100.0 * (ratio[policy] - 1)),
                         rc[0] if rc else '0',
                         '%s (%s%%)' % (rc[1], rc[2]) if rc else '0',
                         'yes' if losses[policy] == losses['none'] else 'NO: %r' % (losses[policy],)])
        header = ['policy', 'arena MiB (of none)', 'step ms, %d threads, median of %d rounds (vs none: median ratio)' % (args.threads, args.rounds),
                  'values recomputed', 'MFLOP added (of the forward)', 'losses equal none\'s']
        lines.append('%s, batch %d (fusion on):' % (name, cfg['batch']))
        lines.append('')
        lines.append(bench_cpu.render(header, rows, args.markdown))
        fit = args.fit_mib << 20
        b0 = largest_batch(args, spec, 'none')
        b1 = largest_batch(args, spec, 'budget=%d' % fit)
        lines.append('')
        lines.append('Largest batch whose train-step arena fits %d MiB: %d without recompute, %d with '
                     '--recompute budget=%d (%.2fx).' % (args.fit_mib, b0, b1, fit, b1 / b0 if b0 else 0))
        lines.append('')
    print('\n'.join(lines))
    return 0


if __name__ == '__main__':
    sys.exit(main())
