#!/usr/bin/env python3
# Describes a GPU device object so lit tests can check that an artifact holds real
# device code: a CUDA fatbin (one line per embedded cubin/PTX with its sm arch), an
# AMDGPU code object (its gfx target from the ELF header's e_flags), or a clang
# offload bundle of code objects (one line per entry; --extract DIR writes each as
# DIR/<arch>.hsaco for the LLVM tools).
import os
import struct
import sys

AMDGPU_MACH = {0x3F: "gfx90a", 0x4C: "gfx942", 0x4F: "gfx950", 0x41: "gfx1100", 0x4E: "gfx1201"}


def fatbin(data):
    magic, _, header, size = struct.unpack_from("<IHHQ", data, 0)
    if magic != 0xBA55ED50:
        sys.exit("not a fatbin (magic %#x)" % magic)
    off = header
    while off < header + size:
        kind, _, entry_header, payload = struct.unpack_from("<HHIQ", data, off)
        arch = struct.unpack_from("<I", data, off + 28)[0]
        body = data[off + entry_header:off + entry_header + 4]
        what = "cubin" if kind == 2 and body == b"\x7fELF" else "ptx" if kind == 1 else "kind%d" % kind
        print("fatbin: sm_%d %s, %d bytes" % (arch, what, payload))
        off += entry_header + payload


def code_object(data):
    if data[:4] != b"\x7fELF":
        sys.exit("not an ELF file")
    machine = struct.unpack_from("<H", data, 18)[0]
    flags = struct.unpack_from("<I", data, 48)[0]
    if machine != 224:
        sys.exit("not an AMDGPU ELF (e_machine %d)" % machine)
    print("code object: AMDGPU %s" % AMDGPU_MACH.get(flags & 0xFF, "mach %#x" % (flags & 0xFF)))


def bundle(data, extract):
    magic = b"__CLANG_OFFLOAD_BUNDLE__"
    if not data.startswith(magic):
        sys.exit("not a clang offload bundle")
    count = struct.unpack_from("<Q", data, len(magic))[0]
    off = len(magic) + 8
    for _ in range(count):
        start, size, tlen = struct.unpack_from("<QQQ", data, off)
        triple = data[off + 24:off + 24 + tlen].decode()
        off += 24 + tlen
        if triple.startswith("host-"):
            continue
        body = data[start:start + size]
        print("bundle entry %s:" % triple, end=" ")
        code_object(body)
        if extract:
            with open(os.path.join(extract, triple.rsplit("-", 1)[-1] + ".hsaco"), "wb") as f:
                f.write(body)


path = sys.argv[1]
with open(path, "rb") as f:
    data = f.read()
if path.endswith(".fatbin"):
    fatbin(data)
elif path.endswith(".hipfb"):
    bundle(data, sys.argv[3] if len(sys.argv) > 3 and sys.argv[2] == "--extract" else None)
else:
    code_object(data)
