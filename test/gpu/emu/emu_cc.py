#!/usr/bin/env python3
# Why: `ortc build --target cuda|rocm` runs the vendor's compiler on the generated
# file; under the emulator that compiler is this driver (ORTC_NVCC / ORTC_HIPCC
# point at the wrappers CMake writes), so the build, the
# artifact and the runtime path are the real ones and only the device differs.
# It preprocesses the exact generated source with the emulator's vendor headers
# (include/), turns each launch `k<<<grid, block, shared, stream>>>(args)` -- the
# one piece of CUDA/HIP syntax that is not C++ -- into a call of emu::launch, and
# compiles the result with clang++ and load/store tracing (the emulator's access
# checks) into kernels.so linked to libortc_emu.so. The "device object" it writes
# (kernels.fatbin / the device-only output, kernels.hipfb) is that rewritten source.
# HIP builds name their archs (--offload-arch); the emulated one is $ORTC_EMU_ARCH if
# among them, else the first: an RDNA arch (gfx10 and later) compiles wave32, as
# clang does, with the arch's macro (__gfx1100__) defined as the device compiler would.
import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
INCLUDE = os.path.join(HERE, "include")


class RewriteError(Exception):
    pass


def _skip_literal(src, i):
    """Index after the string or character literal starting at src[i]."""
    q = src[i]
    i += 1
    while i < len(src) and src[i] != q:
        i += 2 if src[i] == "\\" else 1
    return i + 1


def _match_forward(src, i, open_, close):
    """Index after the bracket closing the one at src[i]."""
    depth = 0
    while i < len(src):
        c = src[i]
        if c in "\"'":
            i = _skip_literal(src, i)
            continue
        if c == open_:
            depth += 1
        elif c == close:
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    raise RewriteError("unbalanced '%s'" % open_)


def _split_top(text):
    """Splits at the commas outside brackets."""
    parts, depth, cur, i = [], 0, "", 0
    while i < len(text):
        c = text[i]
        if c in "\"'":
            j = _skip_literal(text, i)
            cur += text[i:j]
            i = j
            continue
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        if c == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += c
        i += 1
    if cur.strip():
        parts.append(cur.strip())
    return parts


def _callee_start(src, end):
    """Start of the kernel expression that ends at `end` (an id-expression,
    possibly qualified and with template arguments)."""
    i = end
    while True:
        while i > 0 and src[i - 1].isspace():
            i -= 1
        if i > 0 and src[i - 1] == ">":  # template arguments
            depth = 0
            while i > 0:
                i -= 1
                if src[i] == ">":
                    depth += 1
                elif src[i] == "<":
                    depth -= 1
                    if depth == 0:
                        break
            continue
        j = i
        while j > 0 and (src[j - 1].isalnum() or src[j - 1] == "_"):
            j -= 1
        if j == i:
            raise RewriteError("no kernel name before '<<<'")
        i = j
        k = i
        while k > 0 and src[k - 1].isspace():
            k -= 1
        if k >= 2 and src[k - 2:k] == "::":
            i = k - 2
            continue
        return i


def rewrite_launches(src):
    """`k<<<g, b[, shared[, stream]]>>>(args)` -> `::emu::launch(...)`."""
    out, pos, count = [], 0, 0
    i = 0
    while True:
        i = src.find("<<<", i)
        if i < 0:
            break
        start = _callee_start(src, i)
        callee = src[start:i].strip()
        j = src.find(">>>", i + 3)
        if j < 0:
            raise RewriteError("'<<<' without '>>>' after %s" % callee)
        config = _split_top(src[i + 3:j])
        if not 2 <= len(config) <= 4:
            raise RewriteError("launch of %s: %d configuration values" % (callee, len(config)))
        config += ["0", "nullptr"][len(config) - 2:]
        k = j + 3
        while src[k].isspace():
            k += 1
        if src[k] != "(":
            raise RewriteError("launch of %s: no argument list" % callee)
        close = _match_forward(src, k, "(", ")")
        args = src[k + 1:close - 1].strip()
        name = re.sub(r"\s+", "", callee)
        call = ('::emu::launch("%s", __FILE__, __LINE__, %s, %s, %s, %s, [](auto... emu_p) { %s(emu_p...); }%s)'
                % (name, config[0], config[1], config[2], config[3], callee, ", " + args if args else ""))
        out.append(src[pos:start])
        out.append(call)
        pos = i = close
        count += 1
    out.append(src[pos:])
    return "".join(out), count


def emulator_hash():
    h = hashlib.sha256()
    for root, _, files in sorted(os.walk(HERE)):
        for f in sorted(files):
            if f.endswith((".h", ".cpp", ".py")):
                with open(os.path.join(root, f), "rb") as fh:
                    h.update(f.encode() + fh.read())
    return h.hexdigest()[:16]


def clang():
    c = os.environ.get("ORTC_EMU_CXX") or shutil.which("clang++-22") or shutil.which("clang++")
    if not c:
        sys.exit("ortc-emu: clang++-22 was not found (Debian package clang-22)")
    return c


def compile_unit(front, source, output, lib_dir, device_object, link, defines=(), includes=()):
    """Preprocess, rewrite the launches, compile. link: "shared" (kernels.so),
    "executable" (a test program) or None (the device object only)."""
    cxx = clang()
    pre = subprocess.run([cxx, "-E", "-x", "c++", "-std=c++17", "-I", INCLUDE, "-I",
                          os.path.dirname(os.path.abspath(source))] + [f for i in includes for f in ("-I", i)]
                         + list(defines) + [source],
                         capture_output=True, text=True)
    if pre.returncode:
        sys.stderr.write(pre.stderr)
        return pre.returncode
    try:
        text, _ = rewrite_launches(pre.stdout)
    except RewriteError as e:
        sys.stderr.write("ortc-emu: %s: %s\n" % (source, e))
        return 1
    if device_object:
        with open(device_object, "w") as f:
            f.write(text)
    if not link:
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        unit = os.path.join(tmp, os.path.basename(source) + ".emu.cpp")
        with open(unit, "w") as f:
            f.write(text)
        # Tracing runs after optimisation, so only real memory accesses are checked (-O2:
        # twice the speed of -O1 under the emulator, for 15% more compile time). The
        # link leaves out -fsanitize-coverage: its runtime would bring no-op callbacks
        # that win over the emulator's in an executable.
        obj = os.path.join(tmp, "unit.o")
        p = subprocess.run([cxx, "-x", "c++", "-std=c++17", "-O2", "-w", "-fPIC", "-c",
                            "-fsanitize-coverage=func,trace-loads,trace-stores", unit, "-o", obj],
                           capture_output=True, text=True)
        if p.returncode == 0:
            p = subprocess.run([cxx, "-fPIC"] + (["-shared"] if link == "shared" else []) +
                               [obj, "-o", output, "-L", lib_dir, "-lortc_emu", "-Wl,-rpath," + lib_dir, "-ldl"],
                               capture_output=True, text=True)
        if p.returncode:
            sys.stderr.write(p.stderr)
        return p.returncode


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--front", choices=["cuda", "hip"], required=True)
    ap.add_argument("--lib", required=True, help="folder of libortc_emu.so")
    ns, rest = ap.parse_known_args(argv)
    if rest[:1] == ["--"]:
        rest = rest[1:]
    if "--version" in rest:
        print("ortc emulated device compiler (%s front), emulator %s, %s" % (
            ns.front, emulator_hash(), subprocess.run([clang(), "--version"], capture_output=True,
                                                      text=True).stdout.splitlines()[0]))
        return 0
    source = output = keep_dir = None
    shared = device_only = False
    defines, includes, archs = [], [], []
    i = 0
    while i < len(rest):
        a = rest[i]
        if a == "-o":
            output = rest[i + 1]
            i += 1
        elif a == "--keep-dir":
            keep_dir = rest[i + 1]
            i += 1
        elif a in ("-gencode", "-Xcompiler", "--threads", "-Xclang", "-x"):
            i += 1
        elif a.startswith("--offload-arch="):
            archs.append(a.split("=", 1)[1])
        elif a == "-shared":
            shared = True
        elif a == "--cuda-device-only":
            device_only = True
        elif a.startswith("-D"):
            defines.append(a)
        elif a.startswith("-I"):
            includes.append(a[2:] or rest[i + 1])
            i += 0 if a[2:] else 1
        elif not a.startswith("-") and a.endswith((".cu", ".hip")):
            source = a
        i += 1
    if not source or not output:
        sys.stderr.write("ortc-emu: no source or no -o in: %s\n" % " ".join(rest))
        return 2
    if ns.front == "hip" and archs:
        want = os.environ.get("ORTC_EMU_ARCH", "")
        arch = want if want in archs else archs[0]
        defines += ["-D__%s__=1" % arch, "-DEMU_WARP_SIZE=%d" % (32 if re.fullmatch(r"gfx1\d{3}", arch) else 64)]
    if device_only:
        return compile_unit(ns.front, source, output, ns.lib, output, None, defines, includes)
    device_object = os.path.join(keep_dir, "kernels.fatbin") if keep_dir else None
    if keep_dir:
        os.makedirs(keep_dir, exist_ok=True)
    return compile_unit(ns.front, source, output, ns.lib, device_object, "shared" if shared else "executable",
                        defines, includes)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
