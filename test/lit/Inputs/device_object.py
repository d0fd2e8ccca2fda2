#!/usr/bin/env python3
# Describes a GPU device object so lit tests can check that an artifact holds real
# device code: a CUDA fatbin (one line per embedded cubin/PTX with its sm arch) or
# an AMDGPU code object (its gfx target from the ELF header's e_flags).
import struct
import sys

AMDGPU_MACH = {0x3F: "gfx90a", 0x4C: "gfx942", 0x41: "gfx1100"}


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


path = sys.argv[1]
with open(path, "rb") as f:
    data = f.read()
(fatbin if path.endswith(".fatbin") else code_object)(data)
