"""The numeric path of a run: what decides a float computation's last bits on this machine.

The same code, config and seed give the same numbers bit for bit only on the same numeric
path. On a CPU that path is chosen in three layers, each independently of the CPU's vendor
string: ATen's CPU capability (its vectorised kernels: ``DEFAULT``, ``AVX2``, ``AVX512``),
oneDNN's instruction set for convolutions (capped by ``ONEDNN_MAX_CPU_ISA``), and MKL's code
path for matrix products (chosen by CPU and, under ``MKL_CBWR``, pinned); the number of
threads changes the order of parallel reductions. On a GPU the device, CUDA and cuDNN
versions, TF32 and the determinism settings decide it.

:func:`numeric_path` describes the path in force (it goes into every record's and every
``summary.json``'s provenance), :func:`path_key` turns it into a short comparable string, and
:func:`same_path` says whether two recorded paths are known to be the same, known to differ,
or cannot be told apart (a record written before the path was kept).
"""
from __future__ import annotations

import hashlib
import json
import os
import re
from typing import Any

UNKNOWN = "unknown"

#: /proc/cpuinfo flags that choose float kernels (AVX2 and FMA paths, AVX-512 and its BF16 / VNNI /
#: FP16 extensions, Intel AMX tiles). Other flags do not change a float32 result.
KERNEL_FLAGS = ("avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_bf16", "avx512_vnni",
                "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8")

#: Environment settings that pin a layer of the path (read by torch, oneDNN and MKL at load).
#: Thread counts are kept as torch reports them (``intra_op_threads``), not as these variables say.
SETTINGS = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", "MKL_CBWR", "MKL_ENABLE_INSTRUCTIONS",
            "CUBLAS_WORKSPACE_CONFIG")

#: The fields that decide the bits on any device, and those added on a GPU; the rest of
#: :func:`numeric_path` (the CPU's model name, inter-op threads) is for a reader.
CPU_KEY_FIELDS = ("device", "cpu_vendor", "cpu_family", "cpu_model_number", "cpu_kernel_flags", "torch_cpu_capability",
                  "torch", "mkl", "onednn", "onednn_enabled", "settings", "intra_op_threads", "executor",
                  "deterministic_algorithms")
#: Part of the key where recorded: the threads each client trains on (one in a worker process,
#: torch's own in this process); records of schema 3 written before it was kept lack it.
LATER_KEY_FIELDS = ("training_threads",)
GPU_KEY_FIELDS = ("gpu", "cuda", "cudnn", "tf32_matmul", "tf32_cudnn", "cudnn_deterministic", "cudnn_benchmark")
KEY_FIELDS = CPU_KEY_FIELDS + LATER_KEY_FIELDS + GPU_KEY_FIELDS


def _cpuinfo() -> dict[str, str]:
    """The first CPU's fields of /proc/cpuinfo (empty where there is none)."""
    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if not line.strip():
                    break
                key, _, value = line.partition(":")
                fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    return fields


def _library_versions() -> tuple[str, str]:
    """MKL's and oneDNN's versions as torch was built with them."""
    import torch

    shown = torch.__config__.show()
    mkl = re.search(r"Math Kernel Library Version ([^\s]+)", shown)
    onednn = re.search(r"MKL-DNN v([0-9][0-9.]*)", shown)
    return (mkl.group(1) if mkl else "none"), (onednn.group(1) if onednn else "none")


def executor_name(workers: Any, executor: Any = None) -> str:
    """How a round's clients run: ``sequential`` (in this process or in worker processes, which
    give the same bits), ``vectorised`` (clients trained together) or ``flower``."""
    if executor is not None and "flower" in type(executor).__module__:
        return "flower"
    return "vectorised" if workers == "vectorised" else "sequential"


def numeric_path(device: str = "cpu", workers: Any = 0, executor: Any = None,
                 worker_processes: int | None = None) -> dict:
    """Everything that decides this process's float results (see the module docstring);
    ``worker_processes``: how many processes train the clients (``workers`` resolved; 0 or 1:
    this process)."""
    import torch

    info = _cpuinfo()
    flags = set(info.get("flags", "").split())
    mkl, onednn = _library_versions()
    path = {
        "device": "cuda" if str(device).startswith("cuda") else str(device),
        "cpu_vendor": info.get("vendor_id", UNKNOWN),
        "cpu_model": info.get("model name", UNKNOWN),
        "cpu_family": info.get("cpu family", UNKNOWN),
        "cpu_model_number": info.get("model", UNKNOWN),
        "cpu_kernel_flags": [f for f in KERNEL_FLAGS if f in flags],
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "torch": torch.__version__,
        "mkl": mkl,
        "onednn": onednn,
        "onednn_enabled": bool(torch.backends.mkldnn.is_available() and torch._C._get_mkldnn_enabled()),
        "settings": {name: os.environ[name] for name in SETTINGS if name in os.environ},
        "intra_op_threads": torch.get_num_threads(),
        "inter_op_threads": torch.get_num_interop_threads(),
        "worker_processes": worker_processes if worker_processes is not None else (workers if isinstance(workers, int)
                                                                                    else UNKNOWN),
        "training_threads": 1 if (worker_processes or 0) > 1 else torch.get_num_threads(),
        "executor": executor_name(workers, executor),
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
    }
    if path["device"] == "cuda" and torch.cuda.is_available():
        path.update({
            "gpu": torch.cuda.get_device_name(torch.device(device)),
            "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version(),
            "tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
            "tf32_cudnn": torch.backends.cudnn.allow_tf32,
            "cudnn_deterministic": torch.backends.cudnn.deterministic,
            "cudnn_benchmark": torch.backends.cudnn.benchmark,
        })
    return path


def float32_on_gpu(device: str) -> None:
    """On a GPU, compute in float32 as on the CPU: TF32 off for matrix products and for cuDNN's
    convolutions (PyTorch allows TF32 in cuDNN by default). A run then differs from a CPU run only
    in the order of its sums and in its kernels, so its record pools with CPU records of its row
    (the report's rule); on the CPU nothing changes."""
    if str(device).startswith("cuda"):
        import torch

        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False


def unknown_path() -> dict:
    """The path of a record written before pflcore kept it: every field unknown, never guessed."""
    return {"unknown": True, **{name: UNKNOWN for name in KEY_FIELDS}}


def is_known(path: Any) -> bool:
    return isinstance(path, dict) and not path.get("unknown") and all(name in path for name in CPU_KEY_FIELDS)


def path_key(path: dict) -> str:
    """A short string naming a numeric path: two runs with the same key run the same kernels
    (readable head, then a hash of every deciding field)."""
    if not is_known(path):
        return UNKNOWN
    deciding = {name: path.get(name) for name in KEY_FIELDS}
    digest = hashlib.sha256(json.dumps(deciding, sort_keys=True, default=str).encode()).hexdigest()[:10]
    where = path.get("gpu") if path.get("device") == "cuda" else path.get("cpu_vendor")
    threads = path.get("training_threads", path.get("intra_op_threads"))
    return (f"{path.get('device')}-{where}-{path.get('torch_cpu_capability')}-{threads}t-"
            f"{path.get('executor')}-{digest}").replace(" ", "_")


def same_path(a: Any, b: Any) -> bool | None:
    """True if two recorded paths are the same, False if they differ, None if either is unknown.

    The executor's workers count is not part of it: in this process and in worker processes a
    round computes the same bits (the pinned-number tests hold both to one hash)."""
    if not (is_known(a) and is_known(b)):
        return None
    return path_key(a) == path_key(b)


def in_words(path: Any) -> str:
    """One phrase for a person: where a run's bits come from."""
    if not is_known(path):
        return "a numeric path that was not recorded (the record predates it)"
    if path.get("device") == "cuda":
        return (f"{path.get('gpu')}, CUDA {path.get('cuda')}, cuDNN {path.get('cudnn')}, TF32 "
                f"{'on' if path.get('tf32_matmul') else 'off'}, {path.get('executor')}")
    settings = ", ".join(f"{k}={v}" for k, v in sorted(path.get("settings", {}).items()))
    return (f"{path.get('cpu_vendor')} {path.get('cpu_model')} (family {path.get('cpu_family')} model "
            f"{path.get('cpu_model_number')}), ATen {path.get('torch_cpu_capability')}, MKL {path.get('mkl')}, "
            f"oneDNN {path.get('onednn')}, {_threads_in_words(path)}"
            + (f", {settings}" if settings else ""))


def _threads_in_words(path: dict) -> str:
    processes, threads = path.get("worker_processes"), path.get("training_threads", path.get("intra_op_threads"))
    if isinstance(processes, int) and processes > 1:
        return f"{processes} worker processes of {threads} training thread(s) each"
    return f"{threads} training thread(s), {path.get('executor')}"
