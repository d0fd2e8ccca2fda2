#!/usr/bin/env python3
# Checks ortc's reference evaluator against a peer's suite: the ONNX backend node tests
# (from PyPI's onnx) of every op in ortc's converter table. Each selected test is run
# through ortc-eval and compared with onnx's expected outputs; allowlist.txt records
# which tests pass and which are expected failures (with the reason), strictly: in
# --check mode a listed pass that fails and an xfail that passes both fail the run.
# --update rewrites the allowlist and --doc writes the supported-ops table from the
# results, so the table is never written by hand.
#
#   run_node_tests.py [--build DIR] [--check | --update] [--doc docs/supported-ops.md]
#                     [-k SUBSTRING] [--jobs N] [-v]
#
# The node tests are read from onnx's backend/test/data/node when the wheel ships it;
# the onnx 1.23 wheel does not, and the cases are then generated in-process (~10 s) with
# onnx's own case generators (onnx.backend.test.case.node), seeded so that the random
# inputs are the same on every run.
import argparse
import collections
import concurrent.futures
import os
import re
import subprocess
import sys
import tempfile
import warnings

import numpy as np
import onnx
from onnx import numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
ALLOWLIST = os.path.join(HERE, "allowlist.txt")
CONVERTERS = os.path.join(ROOT, "compiler", "Import", "Converters.cpp")
# Operands that ortc's converters need at compile time (axes, pads, shapes, bounds...):
# a static-shape compiler reads them from initializers or Constant nodes, where the node
# tests make them graph inputs. The runner turns such inputs into initializers with the
# test's values (the op's semantics are untouched); any other input stays an input.
COMPILE_TIME_INPUTS = {
    "Clip": (1, 2), "ConstantOfShape": (0,), "Dropout": (1, 2), "Expand": (1,),
    "Pad": (1, 2, 3), "Range": (0, 1, 2), "ReduceMax": (1,), "ReduceMean": (1,),
    "ReduceSum": (1,), "ReduceMin": (1,), "ReduceL1": (1,), "ReduceL2": (1,), "ReduceLogSum": (1,), "ReduceLogSumExp": (1,), "ReduceSumSquare": (1,), "Reshape": (1,), "Slice": (1, 2, 3, 4), "Split": (1,),
    "Squeeze": (1,), "Tile": (1,), "Trilu": (1,), "Unsqueeze": (1,),
    "GatherND": (1,), "CumSum": (1,), "SequenceAt": (1,), "TopK": (1,), "ReduceProd": (1,),
    "SplitToSequence": (1,), "LSTM": (4,), "GRU": (4,), "Resize": (1, 2, 3), "Upsample": (1,),
}
MAX_MODEL_BYTES = 4 << 20  # models (with their data) larger than this are skipped
TIMEOUT_S = 60

# Deliberate differences from ONNX's reference, by test name: the allowlist reason.
KNOWN_DIFFERENCES = [
    (r"^test_training_dropout(_default)?$",
     "known semantic choice: ortc's dropout mask comes from its own counter-based RNG "
     "(seed, op key, element), not numpy's, so the dropped elements differ"),
    (r"^test_bernoulli",
     "known semantic choice: ortc draws from its own counter-based RNG (the run's seed, the "
     "op key, the element), not numpy's, so the draws differ"),
    (r"^test_batchnorm_.*_training_mode$",
     "known semantic choice: in training mode ortc's BatchNormalization yields only Y (which "
     "matches); the running mean/var are not graph outputs but buffers the training pass "
     "updates, with PyTorch's unbiased batch variance where ONNX's running_var is biased"),
]
# Failure messages -> the category written into the allowlist by --update (first match
# wins). A reason in the allowlist is kept while the test keeps failing.
CATEGORIES = [
    (r"unsupported dtype", "unsupported dtype"),
    (r"outside the supported range", "opset outside ortc's 7-28"),
    (r"output of \w+ is not supported|log_prob output", "unsupported optional output"),
    (r"known at compile time|computed at run time|dynamic dim",
     "needs a value known at compile time"),
    (r"not supported|unknown auto_pad|unknown approximate", "unsupported attribute or input form"),
]


# --------------------------------------------------------------------------- cases


def supported_ops():
    """The op names of ortc's converter table ({"Name", {conv..., N}} entries)."""
    with open(CONVERTERS) as f:
        src = f.read()
    table = src[src.index("converterTable()"):]
    return set(re.findall(r'\{"(\w+)",\s*\{\w', table))


class Case:
    def __init__(self, name, model, data_sets, rtol=1e-3, atol=1e-7):
        self.name, self.model, self.data_sets = name, model, data_sets
        self.rtol, self.atol = rtol, atol


def _load_pb(path):
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return numpy_helper.to_array(t)


def load_cases():
    """Every node test: from onnx's data directory when the package has one, else
    generated (seeded) from onnx's case generators."""
    data = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "node")
    cases = []
    if os.path.isdir(data):
        for name in sorted(os.listdir(data)):
            d = os.path.join(data, name)
            model = onnx.load(os.path.join(d, "model.onnx"), load_external_data=False)
            sets = []
            for s in sorted(x for x in os.listdir(d) if x.startswith("test_data_set_")):
                files = sorted(os.listdir(os.path.join(d, s)))
                ins = [_load_pb(os.path.join(d, s, f)) for f in files if f.startswith("input_")]
                outs = [_load_pb(os.path.join(d, s, f)) for f in files if f.startswith("output_")]
                sets.append((ins, outs))
            cases.append(Case(name, model, sets))
        return cases
    np.random.seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import onnx.backend.test.case.node as node_cases
        generated = node_cases.collect_testcases()
    for c in generated:
        sets = [([_array(x) for x in ins], [_array(x) for x in outs]) for ins, outs in c.data_sets]
        cases.append(Case(c.name, c.model, sets, c.rtol, c.atol))
    return sorted(cases, key=lambda c: c.name)


def _array(x):
    """Tensors as numpy arrays (numpy scalars become 0-d arrays); sequences, maps and
    optionals are left as they are (select() skips their tests)."""
    if isinstance(x, onnx.TensorProto):
        return numpy_helper.to_array(x)
    if isinstance(x, np.generic):
        return np.asarray(x)
    return x


def model_ops(model):
    """(domain, op_type) of every node, subgraphs included."""
    ops = set()

    def walk(graph):
        for n in graph.node:
            ops.add((n.domain, n.op_type))
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    walk(a.g)
                for g in a.graphs:
                    walk(g)

    walk(model.graph)
    return ops


def select(cases, ops):
    """The tests whose every node is an ai.onnx op in `ops`; skipped ones with why."""
    chosen, skipped = [], []
    for c in cases:
        used = model_ops(c.model)
        if not used or any(d not in ("", "ai.onnx") or o not in ops for d, o in used):
            continue
        if not all(isinstance(a, np.ndarray) for ins, outs in c.data_sets for a in ins + outs):
            skipped.append((c.name, "non-tensor inputs or outputs"))
            continue
        size = c.model.ByteSize() + sum(a.nbytes for ins, outs in c.data_sets for a in ins + outs)
        if size > MAX_MODEL_BYTES:
            skipped.append((c.name, "larger than %d MB" % (MAX_MODEL_BYTES >> 20)))
            continue
        chosen.append(c)
    return chosen, skipped


def primary_op(case, by_name):
    """The op a test is about: its only op, or for `*_expanded` (function bodies) the op
    of the test it expands."""
    base = re.sub(r"_expanded(_ver\d+)?$", "", case.name)
    if base != case.name and base in by_name:
        return by_name[base]
    kinds = sorted({o for _, o in model_ops(case.model)} - {"Constant"}) or ["Constant"]
    return kinds[0] if len(kinds) == 1 else "+".join(kinds)


# --------------------------------------------------------------------------- running


def npz_feed(arr):
    """Arrays in a dtype ortc-eval's .npz reader takes: bfloat16 travels as its uint16
    bits (the project's convention), other integer widths widen to int64 (the importer
    still sees, and judges, the model's declared dtype)."""
    a = np.asarray(arr)
    if a.dtype in (np.float16, np.float32, np.float64, np.int64, np.int32, np.bool_, np.uint8):
        return a
    if str(a.dtype) == "bfloat16":
        return a.view(np.uint16)
    if a.dtype.kind in "iu":
        return a.astype(np.int64)
    return a


def compare(name, got, want, rtol, atol):
    """None if `got` matches `want`, else a one-line reason."""
    want = np.asarray(want)
    if got.shape != want.shape:
        return "output %s: shape %s, expected %s" % (name, got.shape, want.shape)
    wk = "f" if want.dtype.kind in "fc" or str(want.dtype) == "bfloat16" else "i"
    gk = "f" if got.dtype.kind == "f" else "i"
    if wk != gk:
        return "output %s: dtype kind %s, expected %s (%s)" % (name, got.dtype, wk, want.dtype)
    if wk == "i":
        bad = got.astype(np.int64) != want.astype(np.int64)
        if bad.any():
            return "output %s: %d of %d values differ" % (name, bad.sum(), bad.size)
        return None
    w = want.astype(np.float64)
    g = got.astype(np.float64)
    if (np.isnan(g) != np.isnan(w)).any():
        return "output %s: NaN positions differ" % name
    ok = ~np.isnan(w)
    g, w = g[ok], w[ok]
    inf = np.isinf(w) | np.isinf(g)
    if (g[inf] != w[inf]).any():
        return "output %s: infinities differ" % name
    err = np.abs(g[~inf] - w[~inf])
    bad = err > atol + rtol * np.abs(w[~inf])
    if bad.any():
        return "output %s: max abs error %.3g (%d of %d values off, rtol=%g atol=%g)" % (
            name, err.max(), bad.sum(), bad.size, rtol, atol)
    return None


def first_error(text):
    """ortc-eval's message on one line, without the temporary model path; an importer
    list of problems is joined (repeats dropped)."""
    lines = [l.strip() for l in text.splitlines() if l.strip()]
    for i, l in enumerate(lines):
        if "error" in l:
            l = re.sub(r"^ortc-eval: error: (\S*model\.onnx: )?", "", l)
            if re.fullmatch(r"\d+ problems:", l):
                items = []
                for p in lines[i + 1:]:
                    p = p.lstrip("- ")
                    if p not in items:
                        items.append(p)
                l = "; ".join(items)
            return l if len(l) < 300 else l[:297] + "..."
    return lines[-1][:300] if lines else "no message"


def run_once(ortc_eval, model_path, feed_path, out_path, f32):
    cmd = [ortc_eval, model_path, "--inputs", feed_path, "-o", out_path]
    if f32:
        cmd.append("--f32")
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return None, "timed out after %d s" % TIMEOUT_S
    except OSError as e:
        return None, "cannot run ortc-eval: %s" % e
    if p.returncode != 0:
        return None, first_error(p.stderr + p.stdout) + ("" if p.returncode == 1 else " (exit %d)" % p.returncode)
    with np.load(out_path) as z:
        return dict(z), None


def freeze_compile_time_inputs(model, data_sets):
    """Moves the graph inputs listed in COMPILE_TIME_INPUTS into initializers (only with
    one data set, whose values they take). Returns the feeds of the remaining inputs."""
    inits = {t.name for t in model.graph.initializer}
    in_names = [i.name for i in model.graph.input if i.name not in inits]
    frozen = set()
    if len(data_sets) == 1:
        for n in model.graph.node:
            for k in COMPILE_TIME_INPUTS.get(n.op_type, ()):
                if k < len(n.input) and n.input[k] in in_names:
                    frozen.add(n.input[k])
    values = dict(zip(in_names, data_sets[0][0])) if data_sets else {}
    for name in sorted(frozen):
        model.graph.initializer.append(numpy_helper.from_array(np.asarray(values[name]), name))
    keep = [i for i in model.graph.input if i.name not in frozen]
    del model.graph.input[:]
    model.graph.input.extend(keep)
    index = [k for k, n in enumerate(in_names) if n not in frozen]
    names = [in_names[k] for k in index]
    return names, [([ins[k] for k in index], outs) for ins, outs in data_sets]


def run_case(args):
    """(name, passed, reason, mode) of one test; mode is "f64" or "f32"."""
    ortc_eval, name, model_bytes, data_sets, rtol, atol = args
    model = onnx.ModelProto()
    model.ParseFromString(model_bytes)
    in_names, data_sets = freeze_compile_time_inputs(model, data_sets)
    model_bytes = model.SerializeToString()
    out_names = [o.name for o in model.graph.output]
    floats32 = all(o.type.tensor_type.elem_type != onnx.TensorProto.DOUBLE for o in model.graph.output)
    with tempfile.TemporaryDirectory(prefix="ortc-node-") as d:
        model_path = os.path.join(d, "model.onnx")
        with open(model_path, "wb") as f:
            f.write(model_bytes)
        reason = None
        for mode in ("f64", "f32") if floats32 else ("f64",):
            reason = None
            for k, (ins, outs) in enumerate(data_sets):
                feed_path = os.path.join(d, "feed%d.npz" % k)
                np.savez(feed_path, **{n: npz_feed(a) for n, a in zip(in_names, ins)})
                got, err = run_once(ortc_eval, model_path, feed_path, os.path.join(d, "out.npz"),
                                    mode == "f32")
                if err:
                    return name, False, err, mode
                for n, want in zip(out_names, outs):
                    if n not in got:
                        reason = "output %s missing from ortc-eval's results" % n
                    else:
                        reason = compare(n, got[n], want, rtol, atol)
                    if reason:
                        break
                if reason:
                    break
            if not reason:
                return name, True, "", mode
        return name, False, reason, mode


# --------------------------------------------------------------------------- allowlist


def read_allowlist(path):
    """{test: (status, reason)} from lines `pass NAME [# note]` / `xfail NAME  # reason`."""
    out = {}
    if not os.path.exists(path):
        return out
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            body, _, comment = line.partition("#")
            parts = body.split()
            if not parts:
                continue
            if len(parts) != 2 or parts[0] not in ("pass", "xfail"):
                sys.exit("%s:%d: expected 'pass NAME' or 'xfail NAME  # reason'" % (path, lineno))
            out[parts[1]] = (parts[0], comment.strip())
    return out


def summarize(reason):
    """An ortc message without node/input names, dtypes by name, repeats dropped."""
    parts = []
    for p in reason.split("; "):
        p = re.sub(r"^(node '[^']*' \(\w+\)|input '[^']*'|initializer '[^']*'): ", "", p)
        p = re.sub(r"type (\d+)", lambda m: onnx.TensorProto.DataType.Name(int(m.group(1))), p)
        if p not in parts:
            parts.append(p)
    return "; ".join(parts)


def xfail_reason(name, reason):
    """`category: detail` for a failing test."""
    for pattern, text in KNOWN_DIFFERENCES:
        if re.search(pattern, name):
            return text
    detail = summarize(reason)
    for pattern, cat in CATEGORIES:
        if re.search(pattern, detail):
            return "%s: %s" % (cat, detail)
    return "uncategorized: %s" % detail


def write_allowlist(path, results, old):
    passes, groups = [], collections.defaultdict(list)
    for name, (ok, reason, mode) in sorted(results.items()):
        if ok:
            passes.append("pass %s%s" % (name, "  # float32 evaluation" if mode == "f32" else ""))
            continue
        prev = old.get(name)
        # A hand-written reason survives while the test keeps failing.
        text = prev[1] if prev and prev[0] == "xfail" and prev[1] else xfail_reason(name, reason)
        cat, _, _ = text.partition(":")
        groups[cat.strip()].append("xfail %s  # %s" % (name, text))
    lines = [
        "# ONNX backend node tests of the ops in ortc's converter table, as run by",
        "# run_node_tests.py against the reference evaluator (ortc-eval). Strict: a `pass`",
        "# that fails and an `xfail` that passes both fail --check. Regenerate with --update;",
        "# xfail reasons are `category: detail` and are kept across updates while the test",
        "# still fails.",
        "",
    ]
    lines += passes
    for cat in sorted(groups):
        lines += ["", "# --- xfail: %s (%d)" % (cat, len(groups[cat]))] + groups[cat]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


# --------------------------------------------------------------------------- doc


def write_doc(path, cases, results, allow, ops):
    by_name = {}
    for c in cases:
        if "_expanded" not in c.name:
            kinds = {n.op_type for n in c.model.graph.node} - {"Constant"}
            if len(kinds) == 1:
                by_name[c.name] = kinds.pop()
    # op -> [passing, xfailed, {category: [details]}]
    per_op = collections.defaultdict(lambda: [0, 0, collections.defaultdict(list)])
    for c in cases:
        if c.name not in results:
            continue
        row = per_op[primary_op(c, by_name)]
        ok, reason, _ = results[c.name]
        if ok:
            row[0] += 1
            continue
        row[1] += 1
        text = allow.get(c.name, ("", ""))[1] or xfail_reason(c.name, reason)
        cat, _, detail = text.partition(": ")
        row[2][cat].append(detail)

    def notes(reasons):
        out = []
        for cat, details in sorted(reasons.items(), key=lambda kv: (-len(kv[1]), kv[0])):
            if cat == "unsupported dtype":
                items = sorted(set(re.findall(r"unsupported dtype (\w+)", " ".join(details))))
            elif cat.startswith("opset"):
                items = sorted(set(re.findall(r"opset (\d+) is outside", " ".join(details))), key=int)
                items = ["opset " + ", ".join(items)] if items else []
            elif cat.startswith("known"):
                items = sorted(set(details))
            else:
                items = sorted({d.split("; ")[0] for d in details})
            out.append("%s (%d)%s" % (cat, len(details), ": " + ", ".join(items) if items else ""))
        return "; ".join(out).replace("|", "\\|")

    head = ["| ONNX op | passing | xfailed | notes: xfail reasons (count) |", "|---|---:|---:|---|"]
    lines = [
        "# Supported ONNX ops",
        "",
        "<!-- Generated by test/backend/run_node_tests.py --doc; do not edit by hand. -->",
        "",
        "The ops of ortc's converter table (compiler/Import/Converters.cpp) and how the",
        "reference evaluator (ortc-eval) does on their ONNX backend node tests (onnx %s)."
        % onnx.__version__,
        "A test is run when every op of its model is in the table; `*_expanded` tests (an",
        "op's function body) count for the op they expand. Inputs that ortc needs at compile",
        "time (axes, pads, shapes, bounds...) are given as initializers. Expected failures",
        "and their reasons are listed in test/backend/allowlist.txt, which ctest",
        "(onnx_backend_node_tests) checks strictly.",
        "",
    ] + head
    total = [0, 0]
    for op in sorted(ops):
        p, x, reasons = per_op.get(op, [0, 0, {}])
        total[0] += p
        total[1] += x
        text = notes(reasons) if p + x else "no backend node test uses only supported ops"
        lines.append("| %s | %d | %d | %s |" % (op, p, x, text))
    others = sorted(set(per_op) - set(ops))
    if others:
        lines += ["", "Ops outside the table whose function-body (`*_expanded`) tests use only",
                  "table ops, so run through their decomposition:", ""] + head
        for op in others:
            p, x, reasons = per_op[op]
            total[0] += p
            total[1] += x
            lines.append("| %s | %d | %d | %s |" % (op, p, x, notes(reasons)))
    lines += ["", "Total: %d passing, %d xfailed." % tuple(total), ""]
    with open(path, "w") as f:
        f.write("\n".join(lines))


# --------------------------------------------------------------------------- main


def main():
    ap = argparse.ArgumentParser(
        description="ONNX backend node tests against ortc's reference evaluator")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="fail on any deviation from the allowlist")
    mode.add_argument("--update", action="store_true", help="rewrite the allowlist from the results")
    ap.add_argument("--doc", help="write the supported-ops table (markdown) here")
    ap.add_argument("--allowlist", default=ALLOWLIST)
    ap.add_argument("-k", dest="filter", help="only tests whose name contains this")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()

    ortc_eval = os.path.join(args.build, "tools", "ortc-eval", "ortc-eval")
    if not os.path.exists(ortc_eval):
        sys.exit("run_node_tests: %s not found (build the ortc-eval target)" % ortc_eval)
    if args.filter and (args.update or args.doc):
        sys.exit("run_node_tests: --update and --doc need the full run (no -k)")
    ops = supported_ops()
    cases = load_cases()
    chosen, skipped = select(cases, ops)
    if args.filter:
        chosen = [c for c in chosen if args.filter in c.name]
    work = [(ortc_eval, c.name, c.model.SerializeToString(), c.data_sets, c.rtol, c.atol)
            for c in chosen]
    results = {}
    with concurrent.futures.ProcessPoolExecutor(max_workers=args.jobs) as pool:
        for name, ok, reason, mode in pool.map(run_case, work, chunksize=4):
            results[name] = (ok, reason, mode)
            if args.verbose:
                print("%-5s %s%s" % ("PASS" if ok else "FAIL", name, ("  # f32" if mode == "f32" else "") if ok else "  # " + reason))

    allow = read_allowlist(args.allowlist)
    if args.update:
        write_allowlist(args.allowlist, results, allow)
        allow = read_allowlist(args.allowlist)
        print("wrote %s" % args.allowlist)
    if args.doc:
        write_doc(args.doc, cases, results, allow, ops)
        print("wrote %s" % args.doc)
    if args.verbose:
        for name, why in skipped:
            print("SKIP  %s  # %s" % (name, why))

    problems = []
    xfailed = collections.Counter()
    for name, (ok, reason, _) in sorted(results.items()):
        status = allow.get(name, (None, ""))[0]
        if status is None:
            problems.append("%s: not in the allowlist (%s)" % (name, "passes" if ok else reason))
        elif status == "pass" and not ok:
            problems.append("%s: FAILED (listed as pass): %s" % (name, reason))
        elif status == "xfail" and ok:
            problems.append("%s: UNEXPECTED PASS (listed as xfail: %s)" % (name, allow[name][1]))
        elif status == "xfail":
            xfailed[allow[name][1].partition(":")[0].strip() or "no reason"] += 1
    if not args.filter:
        for name in sorted(set(allow) - set(results)):
            problems.append("%s: in the allowlist but not run (not selected or not in onnx %s)"
                            % (name, onnx.__version__))
    for p in problems:
        print(p)
    # "passed": passing and listed as pass; "failed": every deviation from the allowlist
    # (a listed pass that fails, an xfail that passes, a test missing from the list or a
    # listed test that was not run); "xfailed": failing as listed, by reason category.
    ok_as_listed = sum(ok and allow.get(n, ("",))[0] == "pass" for n, (ok, _, _) in results.items())
    print("%d passed, %d failed, %d xfailed (%s), %d skipped"
          % (ok_as_listed, len(problems), sum(xfailed.values()),
             ", ".join("%s: %d" % kv for kv in sorted(xfailed.items())) or "none", len(skipped)))
    return 1 if args.check and problems else 0


if __name__ == "__main__":
    sys.exit(main())
