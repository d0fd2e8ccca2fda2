# lit configuration: every .mlir/.onnxtxt/.test file under test/lit is a test; the
# ortc tools, FileCheck and not are on PATH.
import os
import lit.formats

config.name = "ortc"
config.test_format = lit.formats.ShTest(execute_external=True)
config.suffixes = [".mlir", ".test"]
config.excludes = ["Inputs"]
config.test_source_root = os.path.join(config.ortc_src_root, "test", "lit")
config.test_exec_root = os.path.join(config.ortc_obj_root, "test", "lit")
bins = [os.path.join(config.ortc_obj_root, "tools", d) for d in ("ortc", "ortc-opt")]
bins.append(os.path.join(config.ortc_obj_root, "runtime"))
bins.append(config.llvm_tools_dir)
config.environment["PATH"] = os.pathsep.join(bins + [config.environment.get("PATH", os.environ["PATH"])])
config.substitutions.append(("%samples", os.path.join(config.ortc_src_root, "samples")))
config.substitutions.append(("%inputs", os.path.join(config.test_source_root, "Inputs")))
config.substitutions.append(("%python", os.path.join(config.ortc_src_root, ".venv", "bin", "python")))
# Generated kernels are compiled through a cache keyed by their source hash, CPU ones at -O1.
config.environment["ORTC_KERNEL_CACHE"] = os.path.join(config.ortc_obj_root, "kernel-cache")
config.environment["ORTC_CXX_OPT"] = "-O1"
# GPU toolchains: nvcc from the CUDA toolkit; for rocm clang-22 with Debian's HIP headers
# (scripts/setup.sh installs them).
import shutil
if os.access("/usr/local/cuda/bin/nvcc", os.X_OK):
    config.available_features.add("nvcc")
if shutil.which("clang++-22") and os.path.exists("/usr/include/hip/hip_runtime.h"):
    config.available_features.add("rocm")
