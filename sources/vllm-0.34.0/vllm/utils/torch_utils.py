# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
import array
import contextlib
import os
import random
import sys
import threading
from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import numpy.typing as npt
import torch
from torch.library import Library, infer_schema

import vllm.envs as envs
from vllm.logger import init_logger
from vllm.utils.platform_utils import is_pin_memory_available
from vllm.utils.torch_version import (  # noqa: F401
    _is_torch_equal,
    _is_torch_equal_or_newer,
    is_torch_equal,
    is_torch_equal_or_newer,
)

if TYPE_CHECKING:
    from vllm.config import ModelConfig
    from vllm.sequence import IntermediateTensors
else:
    ModelConfig = object
    IntermediateTensors = object

logger = init_logger(__name__)


# NOTE: registration-time-mutable. Platform backends inject custom
# --kv-cache-dtype entries here via register_kv_cache_dtype(). Never snapshot
# this dict (no dict(...), .copy(), list(.keys()), etc.) — every consumer must
# hold a reference to this live object to see later-registered entries.
STR_DTYPE_TO_TORCH_DTYPE = {
    "float32": torch.float32,
    "half": torch.half,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float": torch.float,
    "fp8": torch.uint8,
    "fp8_e4m3": torch.uint8,
    "fp8_e5m2": torch.uint8,
    "int8": torch.int8,
    "int4_per_token_head": torch.uint8,
    "int8_per_token_head": torch.int8,
    "fp8_per_token_head": torch.uint8,
    "fp8_inc": torch.float8_e4m3fn,
    "fp8_ds_mla": torch.uint8,
    "nvfp4_ds_mla": torch.uint8,
    "turboquant_k8v4": torch.uint8,
    "turboquant_4bit_nc": torch.uint8,
    "turboquant_k3v4_nc": torch.uint8,
    "turboquant_3bit_nc": torch.uint8,
    "octave_k3v4": torch.uint8,
    "octave_k3v3": torch.uint8,
    "octave_k3v3_compact": torch.uint8,
    "ultraquant_4bit": torch.uint8,
    "nvfp4": torch.uint8,
    "nvfp4_4over6": torch.uint8,
}

TORCH_DTYPE_TO_NUMPY_DTYPE = {
    torch.float16: np.float16,
    torch.float32: np.float32,
    torch.float64: np.float64,
    torch.uint8: np.uint8,
    torch.uint16: np.uint16,
    torch.uint32: np.uint32,
    torch.uint64: np.uint64,
    torch.int8: np.int8,
    torch.int16: np.int16,
    torch.int32: np.int32,
    torch.int64: np.int64,
    torch.bool: np.bool_,
}

# array.array typecodes with the same item layout as the torch dtype.
TORCH_DTYPE_TO_ARRAY_TYPECODE = {torch.int32: "i", torch.int64: "q", torch.float32: "f"}
for _dtype, _typecode in TORCH_DTYPE_TO_ARRAY_TYPECODE.items():
    assert array.array(_typecode).itemsize == _dtype.itemsize


MODELOPT_TO_VLLM_KV_CACHE_DTYPE_MAP = {
    "fp8": "fp8_e4m3",
    "nvfp4": "nvfp4",
}

T = TypeVar("T")


def token_ids_to_tensor(
    token_ids: Sequence[int], dtype: torch.dtype = torch.int64
) -> torch.Tensor:
    """CPU tensor of token ids. A TokenBuffer is copied as one block rather than
    read token by token; the copy keeps the buffer resizable."""
    return torch.tensor(np.asarray(token_ids), dtype=dtype)


def is_meta_module(module: torch.nn.Module) -> bool:
    """Return True if module contains any meta parameters or buffers."""
    return any(p.is_meta for p in module.parameters()) or any(
        b.is_meta for b in module.buffers()
    )


def is_strictly_contiguous(t: torch.Tensor) -> bool:
    """Check if tensor is contiguous AND has no degenerate strides.

    A degenerate stride occurs when a dimension has size 1 but the stride
    doesn't match the canonical contiguous layout. This can cause issues
    in some CUDA kernels that rely on stride values for memory access.

    For a C-contiguous tensor of shape (d0, d1, ..., dn), the expected
    strides are: stride[i] = product(shape[i+1:]) for all i, with stride[-1]=1.

    Example with torch.Size([16, 1, 8, 32]):
        - Canonical strides: (256, 256, 32, 1)
        - Degenerate strides: (256, 1, 32, 1)  # dim=1 has size=1, allowing
                                                  # non-canonical stride in dim=0
    """
    if not t.is_contiguous():
        return False

    # Check that strides match canonical contiguous layout
    shape = t.shape
    strides = t.stride()
    expected_stride = 1
    for i in range(len(shape) - 1, -1, -1):
        if strides[i] != expected_stride:
            return False
        expected_stride *= shape[i]
    return True


def is_non_overlapping_and_dense(t: torch.Tensor) -> bool:
    """Check if the tensor's elements cover one gapless, non-overlapping byte
    range, in any dimension order (i.e. a permuted view of a contiguous
    tensor); ``is_contiguous()`` additionally requires row-major order.
    """
    expected_stride = 1
    for size, stride in sorted(zip(t.shape, t.stride()), key=lambda p: p[1]):
        if size == 1:
            continue
        if stride != expected_stride:
            return False
        expected_stride *= size
    return True


def canonicalize_singleton_dim_strides(t: torch.Tensor) -> torch.Tensor:
    """Fix degenerate strides on size=1 dimensions for CUDA TMA compatibility.

    PyTorch allows any stride on a size=1 dim (is_contiguous() is always True
    there), so a size=1 dim may have stride=1 (2 bytes for bf16) instead of
    the canonical product(shape[i+1:]).  CUDA TMA on H100+ requires all
    non-outermost strides to be ≥16-byte aligned; stride=1 triggers
    cudaErrorIllegalInstruction.  Zero-copy: patches stride metadata only via
    as_strided; returns t unchanged if all size=1 strides are already canonical.
    """
    if 1 not in t.shape:
        return t
    strides = list(t.stride())
    shape = t.shape
    prev_stride = 1
    changed = False
    for i in range(len(shape) - 1, -1, -1):
        if shape[i] == 1 and strides[i] != prev_stride:
            strides[i] = prev_stride
            changed = True
        prev_stride = strides[i] * shape[i]
    if not changed:
        return t
    return t.as_strided(t.shape, strides)


@contextlib.contextmanager
def set_default_torch_dtype(dtype: torch.dtype):
    """Sets the default torch dtype to the given dtype."""
    old_dtype = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(old_dtype)


def _cgroup_cpu_limit() -> float | None:
    """Effective CPU quota of this process's cgroup, None if unlimited.

    Resolves the process's own cgroup from /proc/self/cgroup and takes the
    tightest cpu.max (v2) or cfs quota (v1) along the hierarchy.
    """
    limit: float | None = None
    try:
        with open("/proc/self/cgroup") as f:
            entries = [line.strip().split(":", 2) for line in f]

        def visit(base: str, rel_path: str, read_quota) -> None:
            nonlocal limit
            path = rel_path
            while path:
                quota = read_quota(os.path.join(base, path.lstrip("/")))
                if quota is not None:
                    limit = quota if limit is None else min(limit, quota)
                path = path.rsplit("/", 1)[0]

        def read_v2(cg_dir: str) -> float | None:
            try:
                with open(os.path.join(cg_dir, "cpu.max")) as f:
                    quota, period = f.read().split()
                return None if quota == "max" else float(quota) / float(period)
            except (OSError, ValueError):
                return None

        def read_v1(cg_dir: str) -> float | None:
            try:
                with open(os.path.join(cg_dir, "cpu.cfs_quota_us")) as f:
                    quota = int(f.read())
                if quota <= 0:
                    return None
                with open(os.path.join(cg_dir, "cpu.cfs_period_us")) as f:
                    return quota / int(f.read())
            except (OSError, ValueError):
                return None

        for entry in entries:
            if len(entry) != 3:
                continue
            _, controllers, rel_path = entry
            if controllers == "":  # cgroup v2
                visit("/sys/fs/cgroup", rel_path, read_v2)
            elif "cpu" in controllers.split(","):  # cgroup v1
                visit("/sys/fs/cgroup/cpu", rel_path, read_v1)
    except OSError:
        pass
    return limit


def available_cpu_count() -> int:
    """CPUs actually usable by this process: scheduling affinity capped by
    the cgroup CPU quota (unlike `os.cpu_count()`, which is quota-blind)."""
    if sys.platform != "linux":
        return os.cpu_count() or 1
    count = len(os.sched_getaffinity(0))
    limit = _cgroup_cpu_limit()
    if limit is not None:
        count = min(count, int(limit))
    return max(1, count)


# Marks OMP_NUM_THREADS as chosen by vLLM for its worker processes rather than
# set by the user, so a worker knows it may drop the value once startup is done.
OMP_NUM_THREADS_SET_BY_VLLM = "VLLM_OMP_NUM_THREADS_SET_BY_VLLM"


def startup_omp_num_threads(num_local_procs: int) -> int:
    """Thread count for a worker process's startup work (weight loading).

    Weight loading does CPU-parallel work, so workers benefit from more than
    one thread, but only a bounded share of the CPUs this node's workers may
    actually use: torch's default is the host core count, which ignores both
    scheduling affinity and any cgroup CPU quota, and doesn't account for the
    other workers sharing the node.
    """
    return max(1, available_cpu_count() // max(1, num_local_procs))


def set_torch_threads_for_runtime() -> None:
    """Set torch intra-op threads to 1 for steady-state serving.

    Any multi-threaded torch CPU op in the engine hot loop leaves the OMP
    workers spin-waiting after each parallel region, stealing cycles from the
    step's serial code (and burning cgroup CPU quota in containers). No
    steady-state CPU op benefits from intra-op parallelism.
    Respects an externally-set OMP_NUM_THREADS.
    """
    if (
        omp_num_threads := os.environ.get("OMP_NUM_THREADS")
    ) is not None and os.environ.get(OMP_NUM_THREADS_SET_BY_VLLM) != "1":
        try:
            if int(omp_num_threads) > 1:
                logger.warning_once(
                    "OMP_NUM_THREADS=%s is set; leaving Torch threads at %d "
                    "for serving. Multi-threaded torch CPU ops during serving "
                    "can degrade performance through spin-wait contention and "
                    "cgroup CPU-quota throttling.",
                    omp_num_threads,
                    torch.get_num_threads(),
                )
        except ValueError:
            pass
        return
    if torch.get_num_threads() != 1:
        logger.info_once(
            "Reducing Torch threads from %d to 1 for serving. Set "
            "OMP_NUM_THREADS in the external environment to override.",
            torch.get_num_threads(),
        )
        torch.set_num_threads(1)


@contextlib.contextmanager
def set_default_torch_num_threads(num_threads: int | None = None):
    """Sets the default number of threads for PyTorch to the given value.

    `None` means using the value of the environment variable `OMP_NUM_THREADS`
    (or `1` if that is not available).
    """
    if num_threads is None:
        num_threads = 1

        try:
            num_threads = int(os.environ["OMP_NUM_THREADS"])
        except KeyError:
            logger.debug_once(
                "OMP_NUM_THREADS is not set; defaulting Torch threads to %d.",
                num_threads,
            )
        except ValueError:
            logger.warning_once(
                "OMP_NUM_THREADS is invalid; defaulting Torch threads to %d.",
                num_threads,
            )

    old_num_threads = torch.get_num_threads()
    torch.set_num_threads(num_threads)

    try:
        yield
    finally:
        torch.set_num_threads(old_num_threads)


@contextlib.contextmanager
def guard_cuda_initialization():
    """Avoid unexpected CUDA initialization."""
    from vllm.platforms import current_platform

    if not current_platform.is_cuda():
        yield
        return

    old_value = os.environ.get("CUDA_VISIBLE_DEVICES")
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    try:
        yield
    except Exception as e:
        if "No CUDA GPUs are available" in str(e):
            err_msg = "CUDA initialization is blocked."
        else:
            err_msg = str(e)
        raise RuntimeError(err_msg) from e
    finally:
        if old_value is None:
            del os.environ["CUDA_VISIBLE_DEVICES"]
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = old_value


def get_dtype_size(dtype: torch.dtype) -> int:
    """Get the size of the data type in bytes."""
    return torch.tensor([], dtype=dtype).element_size()


# bool = 0, int = 1, float = 2, complex = 3
def _get_precision_level(dtype: torch.dtype) -> int:
    # NOTE: Complex dtypes return `is_floating_point=False`
    return (dtype != torch.bool) + dtype.is_floating_point + dtype.is_complex * 2


def is_lossless_cast(src_dtype: torch.dtype, tgt_dtype: torch.dtype):
    """Test whether it is lossless to cast a tensor from
    `src_dtype` to `tgt_dtype`.
    """
    if src_dtype == tgt_dtype:
        return True

    src_level = _get_precision_level(src_dtype)
    tgt_level = _get_precision_level(tgt_dtype)

    if src_level < tgt_level:
        return True
    if src_level > tgt_level:
        return False

    # Compare integral types
    if not src_dtype.is_floating_point and not src_dtype.is_complex:
        src_info = torch.iinfo(src_dtype)
        tgt_info = torch.iinfo(tgt_dtype)
        return src_info.min >= tgt_info.min and src_info.max <= tgt_info.max

    # Compare floating-point types
    src_info = torch.finfo(src_dtype)
    tgt_info = torch.finfo(tgt_dtype)
    return (
        src_info.min >= tgt_info.min
        and src_info.max <= tgt_info.max
        and src_info.resolution >= tgt_info.resolution
    )


def common_broadcastable_dtype(dtypes: Collection[torch.dtype]):
    """Get the common `dtype` where all of the other `dtypes` can be
    cast to it without losing any information.
    """
    return max(
        dtypes,
        key=lambda dtype: sum(is_lossless_cast(dt, dtype) for dt in dtypes),
    )


def _generate_random_fp8(
    tensor: torch.Tensor,
    low: float,
    high: float,
) -> None:
    # NOTE(zhaoyang): Due to NaN and Inf representation for fp8 data type,
    # it may occur Inf or NaN if we directly use torch.randint
    # to generate random data for fp8 data.
    # For example, s.11111.00 in fp8e5m2 format represents Inf.
    #     | E4M3        | E5M2
    # -----|-------------|-------------------
    # Inf | N/A         | s.11111.00
    # NaN | s.1111.111  | s.11111.{01,10,11}
    from vllm import _custom_ops as ops

    tensor_tmp = torch.empty_like(tensor, dtype=torch.float16)
    tensor_tmp.uniform_(low, high)
    ops.convert_fp8(tensor, tensor_tmp)
    del tensor_tmp


def get_kv_cache_torch_dtype(
    cache_dtype: str | torch.dtype | None,
    model_dtype: str | torch.dtype | None = None,
) -> torch.dtype:
    if isinstance(cache_dtype, str):
        if cache_dtype == "auto":
            if isinstance(model_dtype, str) and model_dtype in STR_DTYPE_TO_TORCH_DTYPE:
                torch_dtype = STR_DTYPE_TO_TORCH_DTYPE[model_dtype]
            elif isinstance(model_dtype, torch.dtype):
                torch_dtype = model_dtype
            else:
                raise ValueError(f"Invalid model dtype: {model_dtype}")
        elif cache_dtype in STR_DTYPE_TO_TORCH_DTYPE:
            torch_dtype = STR_DTYPE_TO_TORCH_DTYPE[cache_dtype]
        else:
            raise ValueError(f"Invalid kv cache dtype: {cache_dtype}")
    elif isinstance(cache_dtype, torch.dtype):
        torch_dtype = cache_dtype
    else:
        raise ValueError(f"Invalid kv cache dtype: {cache_dtype}")
    return torch_dtype


def get_kv_cache_quant_algo_string(quant_cfg: dict[str, Any]) -> str | None:
    """Get the KV cache quantization algorithm string from the quantization config.

    Maps various FP8 format names to vLLM's standard cache dtype strings.
    Returns None if no kv_cache_quant_algo is specified.
    Returns "auto" if the value is not recognized/supported.
    """
    # Mapping from model config values to vLLM cache_dtype strings

    quant_method = quant_cfg.get("quant_method", "")
    if quant_method.startswith("modelopt"):
        quantization_inner = quant_cfg.get("quantization", quant_cfg)
        # Check if quant config is specified and use kv cache quant algo
        kv_algo = (
            quantization_inner.get("kv_cache_scheme")
            or quant_cfg.get("kv_cache_scheme")
            or quantization_inner.get("kv_cache_quant_algo")
            or quant_cfg.get("kv_cache_quant_algo")
        )
        if isinstance(kv_algo, dict):
            if (
                kv_algo.get("dynamic") is False
                and kv_algo.get("num_bits") == 8
                and kv_algo.get("type") == "float"
            ):
                kv_algo = "fp8"
            elif kv_algo.get("num_bits") == 4 and kv_algo.get("type") == "float":
                kv_algo = "nvfp4"
            else:
                # Unknown/unsupported format - return "auto" as safe fallback
                logger.warning(
                    "WARNING: Unknown kv_cache_quant_algo '%s' in model "
                    "config. Supported values: %s. Falling back to 'auto'.",
                    f"{kv_algo}",
                    list(MODELOPT_TO_VLLM_KV_CACHE_DTYPE_MAP.keys()),
                )
                return "auto"
        if isinstance(kv_algo, str):
            kv_algo_lower = kv_algo.lower()

            # Try to map to vLLM's standard format
            if kv_algo_lower in MODELOPT_TO_VLLM_KV_CACHE_DTYPE_MAP:
                return MODELOPT_TO_VLLM_KV_CACHE_DTYPE_MAP[kv_algo_lower]
            else:
                # Unknown/unsupported format - return "auto" as safe fallback
                logger.warning(
                    "WARNING: Unknown kv_cache_quant_algo '%s' in model "
                    "config. Supported values: %s. Falling back to 'auto'.",
                    kv_algo,
                    list(MODELOPT_TO_VLLM_KV_CACHE_DTYPE_MAP.keys()),
                )
                return "auto"
    return None


def resolve_kv_cache_dtype_string(
    kv_cache_dtype: str, model_config: ModelConfig
) -> str:
    """Resolve 'auto' kv_cache_dtype to the actual string value from model config.
    Returns the resolved cache_dtype string.
    """
    if kv_cache_dtype != "auto":
        return kv_cache_dtype

    hf_cfg = getattr(model_config, "hf_config", None)
    if hf_cfg is not None:
        quant_cfg = getattr(hf_cfg, "quantization_config", None)
        if quant_cfg is not None:
            kv_algo_str = get_kv_cache_quant_algo_string(quant_cfg)
            if kv_algo_str is not None:
                return kv_algo_str

    # Default to auto (will be handled by downstream code)
    return "auto"


def kv_cache_dtype_str_to_dtype(
    kv_cache_dtype: str, model_config: ModelConfig
) -> torch.dtype:
    if kv_cache_dtype == "auto":
        # Model config may not be specified for unit tests, default to float16
        return model_config.dtype if model_config else torch.half
    return STR_DTYPE_TO_TORCH_DTYPE[kv_cache_dtype]


def set_random_seed(seed: int | None, data_parallel_index: int = 0) -> None:
    if seed is not None:
        if data_parallel_index:
            # DP engines share the seed but must not sample unseeded requests alike.
            ss = np.random.SeedSequence((seed, data_parallel_index))
            seed = int(ss.generate_state(1)[0])
        random.seed(seed)
        np.random.seed(seed)
        torch.manual_seed(seed)
        from vllm.platforms import current_platform

        current_platform.manual_seed_all(seed)


def nvfp4_kv_cache_full_dim(head_size: int) -> int:
    """Packed last dim for NVFP4 KV cache: fp4 data + fp8 block scales."""
    return head_size // 2 + head_size // 16


def nvfp4_split_data_scale(
    kv_side: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Split one side (K or V) of an NVFP4 KV cache into data and scale.

    The input is a 4D uint8 tensor whose last dimension is
    ``full_dim = data_dim + scale_dim``.  The physical layout within each
    side is ``[data | scale]``, both packed contiguously.

    The caller is responsible for slicing K and V from the combined cache
    first (e.g. ``kv_cache.split(num_kv_heads, dim=1)``).

    Args:
        kv_side: 4D uint8 tensor ``(B, H, N, full_dim)``.

    Returns:
        ``(data, scale)`` where *data* is uint8 and *scale* is
        float8_e4m3fn, both views of the same storage.

    """
    num_pages = kv_side.shape[0]
    dim_1, dim_2 = kv_side.shape[1], kv_side.shape[2]
    full_dim = kv_side.shape[3]
    data_dim = full_dim * 8 // 9
    scale_dim = full_dim - data_dim

    data_per_kv = dim_1 * dim_2 * data_dim
    page_bytes = kv_side.stride(0)

    # Derive inner strides from the kv_side strides, scaling by the
    # ratio of the target dim to full_dim.  This preserves the physical
    # layout (NHD vs HND) encoded in the input tensor's strides.
    s1 = kv_side.stride(1) * data_dim // full_dim
    s2 = kv_side.stride(2) * data_dim // full_dim
    data_shape = (num_pages, dim_1, dim_2, data_dim)
    data_strides = (page_bytes, s1, s2, 1)

    s1_s = kv_side.stride(1) * scale_dim // full_dim
    s2_s = kv_side.stride(2) * scale_dim // full_dim
    scale_shape = (num_pages, dim_1, dim_2, scale_dim)
    scale_strides = (page_bytes, s1_s, s2_s, 1)

    base = kv_side.storage_offset()
    data = torch.as_strided(kv_side, data_shape, data_strides, storage_offset=base)
    scale = torch.as_strided(
        kv_side, scale_shape, scale_strides, storage_offset=base + data_per_kv
    ).view(torch.float8_e4m3fn)

    return data, scale


def create_kv_caches_with_random_flash(
    num_blocks: int,
    block_size: int,
    num_layers: int,
    num_heads: int,
    head_size: int,
    cache_dtype: str | torch.dtype | None,
    model_dtype: str | torch.dtype | None = None,
    seed: int | None = None,
    device: str | None = "cuda",
    cache_layout: str | None = "NHD",
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    set_random_seed(seed)

    dtype = get_kv_cache_torch_dtype(cache_dtype, model_dtype)
    generic_kv_cache_shape = (num_blocks, 2, block_size, num_heads, head_size)
    assert cache_layout in ("NHD", "HND")
    stride_order = (0, 1, 2, 3, 4) if cache_layout == "NHD" else (0, 1, 3, 2, 4)

    kv_cache_allocation_shape = tuple(generic_kv_cache_shape[i] for i in stride_order)
    scale = head_size**-0.5

    key_caches: list[torch.Tensor] = []
    value_caches: list[torch.Tensor] = []

    for _ in range(num_layers):
        if isinstance(cache_dtype, str) and cache_dtype.startswith("nvfp4"):
            # Full page dim: fp4 data + fp8 block scales per head.
            # Per page layout: [K_data | K_scale | V_data | V_scale]
            # Returns [:, 0] and [:, 1] like all other dtypes.
            full_dim = nvfp4_kv_cache_full_dim(head_size)
            nvfp4_shape = (num_blocks, 2, block_size, num_heads, full_dim)
            nvfp4_phys = tuple(nvfp4_shape[i] for i in stride_order)
            inv = [stride_order.index(i) for i in range(len(stride_order))]
            key_value_cache = torch.randint(
                0,
                256,
                nvfp4_phys,
                dtype=dtype,
                device=device,
            ).permute(*inv)
        else:
            key_value_cache = torch.empty(
                size=kv_cache_allocation_shape, dtype=dtype, device=device
            ).permute(*stride_order)
            if cache_dtype in ["auto", "half", "bfloat16", "float"]:
                key_value_cache.uniform_(-scale, scale)
            elif cache_dtype == "fp8":
                _generate_random_fp8(key_value_cache, -scale, scale)
            else:
                raise ValueError(f"Does not support key cache of type {cache_dtype}")
        key_caches.append(key_value_cache[:, 0])
        value_caches.append(key_value_cache[:, 1])
    return key_caches, value_caches


def create_kv_caches_with_random(
    num_blocks: int,
    block_size: int,
    num_layers: int,
    num_heads: int,
    head_size: int,
    cache_dtype: str | torch.dtype | None,
    model_dtype: str | torch.dtype | None = None,
    seed: int | None = None,
    device: str | None = "cuda",
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    if cache_dtype == "fp8" and head_size % 16:
        raise ValueError(
            f"Does not support key cache of type fp8 with head_size {head_size}"
        )

    set_random_seed(seed)

    dtype = get_kv_cache_torch_dtype(cache_dtype, model_dtype)

    scale = head_size**-0.5
    x = 16 // torch.tensor([], dtype=dtype).element_size()
    key_cache_shape = (num_blocks, num_heads, head_size // x, block_size, x)
    key_caches: list[torch.Tensor] = []
    for _ in range(num_layers):
        key_cache = torch.empty(size=key_cache_shape, dtype=dtype, device=device)
        if cache_dtype in ["auto", "half", "bfloat16", "float"]:
            key_cache.uniform_(-scale, scale)
        elif cache_dtype == "fp8":
            _generate_random_fp8(key_cache, -scale, scale)
        else:
            raise ValueError(f"Does not support key cache of type {cache_dtype}")
        key_caches.append(key_cache)

    value_cache_shape = (num_blocks, num_heads, head_size, block_size)
    value_caches: list[torch.Tensor] = []
    for _ in range(num_layers):
        value_cache = torch.empty(size=value_cache_shape, dtype=dtype, device=device)
        if cache_dtype in ["auto", "half", "bfloat16", "float"]:
            value_cache.uniform_(-scale, scale)
        elif cache_dtype == "fp8":
            _generate_random_fp8(value_cache, -scale, scale)
        else:
            raise ValueError(f"Does not support value cache of type {cache_dtype}")
        value_caches.append(value_cache)
    return key_caches, value_caches


def async_tensor_h2d(
    data: list | np.ndarray | torch.Tensor,
    device: str | torch.device | None = None,
    dtype: torch.dtype | None = None,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Copy list/numpy array/tensor async from host to device."""
    if dtype is None and out is not None:
        dtype = out.dtype
    if isinstance(data, np.ndarray):
        data = torch.from_numpy(data)
    if isinstance(data, torch.Tensor):
        t = data
        if PIN_MEMORY and not t.is_pinned():
            # Stage in pinned, contiguous buffer to ensure fully async copy.
            t = torch.empty(
                t.shape, dtype=dtype or t.dtype, device="cpu", pin_memory=True
            ).copy_(t)
    else:
        t = torch.tensor(data, dtype=dtype, pin_memory=PIN_MEMORY, device="cpu")
    assert t.is_cpu

    if out is not None:
        assert out.dtype == dtype
        return out.copy_(t, non_blocking=True)
    assert device is not None, "must provide destination tensor or device"
    return t.to(device=device, dtype=dtype, non_blocking=True)


def np_to_pinned_tensor(array: np.ndarray) -> torch.Tensor:
    t = torch.from_numpy(array)
    return t.pin_memory() if PIN_MEMORY else t


def make_ndarray_with_pad(
    x: list[list[T]],
    pad: T,
    dtype: npt.DTypeLike,
    *,
    max_len: int | None = None,
) -> npt.NDArray:
    """Make a padded array from 2D inputs.

    The padding is applied to the end of each inner list until it reaches
    `max_len`.
    """
    if max_len is None:
        # Unlike for most functions, map is faster than a genexpr over `len`
        max_len = max(map(len, x), default=0)

    padded_x = np.full((len(x), max_len), pad, dtype=dtype)
    for ind, blocktb in enumerate(x):
        assert len(blocktb) <= max_len
        padded_x[ind, : len(blocktb)] = blocktb

    return padded_x


prev_set_stream = torch.cuda.set_stream

_current_stream_tls = threading.local()


def _patched_set_stream(stream: torch.cuda.Stream) -> None:
    _current_stream_tls.value = stream
    prev_set_stream(stream)


torch.cuda.set_stream = _patched_set_stream


class _StreamPlaceholder:
    def __init__(self):
        self.synchronize = lambda: None


def current_stream() -> torch.cuda.Stream:
    """Replace `torch.cuda.current_stream()` with `vllm.utils.current_stream()`.
    it turns out that `torch.cuda.current_stream()` is quite expensive,
    as it will construct a new stream object at each call.
    here we patch `torch.cuda.set_stream` to keep track of the current stream
    directly, so that we can avoid calling `torch.cuda.current_stream()`.

    the underlying hypothesis is that we do not call `torch._C._cuda_setStream`
    from C/C++ code.
    """
    from vllm.platforms import current_platform

    if not hasattr(_current_stream_tls, "value") or _current_stream_tls.value is None:
        # when this function is called before any stream is set,
        # we return the default stream.
        # On ROCm using the default 0 stream in combination with RCCL
        # is hurting performance.
        # On CUDA, we capture and replay cudagraph on the same stream,
        # so we need to avoid using the default stream as well. The default
        # stream cannot be used for cudagraph capture, see
        # https://github.com/pytorch/pytorch/blob/42ad9edfb754743fdae3276ade43de000beb4f60/aten/src/ATen/cuda/CUDAGraph.cpp#L77
        # for more details. Therefore, we create a dedicated stream per process.
        if current_platform.is_rocm() or current_platform.is_cuda():
            # Ensure new stream is ordered w.r.t. replaced stream's work.
            new_stream = torch.cuda.Stream()
            new_stream.wait_stream(torch.cuda.current_stream())
            # torch.cuda.set_stream here is the alias of _pathed_set_stream
            torch.cuda.set_stream(new_stream)
        elif current_platform.is_cpu():
            _current_stream_tls.value = _StreamPlaceholder()
        else:
            current_stream = current_platform.current_stream
            if current_stream is not None:
                _current_stream_tls.value = current_stream()
            else:
                raise ValueError(
                    "Fail to set current stream, current platform "
                    "may not support current_stream with torch API"
                )
    return _current_stream_tls.value


# Global auxiliary stream for running operations in background streams.
# We have single global auxiliary stream to avoid an explosion of streams
# for every layer (and make profiling look sane).
#
# aux_stream() is currently used for:
#   - MoE shared_expert overlap with router
_aux_stream: torch.cuda.Stream | None = None


def aux_stream() -> torch.cuda.Stream | None:
    """Ensures aux_stream is initialized only once."""
    global _aux_stream

    from vllm.platforms import current_platform

    if _aux_stream is None and current_platform.is_cuda_alike():
        _aux_stream = torch.cuda.Stream()

    return _aux_stream


def weak_ref_tensor(tensor: Any) -> Any:
    """Create a weak reference to a tensor.
    The new tensor will share the same data as the original tensor,
    but will not keep the original tensor alive.
    This ignores 0-size tensors as those don't allocate any memory.
    """
    if isinstance(tensor, torch.Tensor) and tensor.numel() > 0:
        return torch.ops._C.weak_ref_tensor(tensor)
    else:
        return tensor


def weak_ref_tensors(
    tensors: torch.Tensor
    | list[torch.Tensor]
    | tuple[torch.Tensor]
    | IntermediateTensors,
) -> torch.Tensor | list[Any] | tuple[Any] | Any:
    """Convenience function to create weak references to tensors,
    for single tensor, possibly nested list/tuple of tensors, or
    IntermediateTensors. Ints and LayerNames are returned as is.
    """
    if isinstance(tensors, torch.Tensor):
        return weak_ref_tensor(tensors)
    if isinstance(tensors, list):
        return [weak_ref_tensors(t) for t in tensors]
    if isinstance(tensors, tuple):
        return tuple(weak_ref_tensors(t) for t in tensors)
    if isinstance(tensors, (int, LayerName)):
        return tensors

    # For IntermediateTensors used in pipeline parallelism
    from vllm.sequence import IntermediateTensors

    if isinstance(tensors, IntermediateTensors):
        ret = IntermediateTensors(
            {key: weak_ref_tensor(val) for key, val in tensors.tensors.items()}
        )
        return ret
    raise ValueError(f"Invalid type for tensors: {type(tensors)}")


def get_accelerator_view_from_cpu_tensor(cpu_tensor: torch.Tensor) -> torch.Tensor:
    """Get an accelerator view of a CPU tensor via Unified Virtual Addressing."""
    from vllm.platforms import current_platform

    if current_platform.is_xpu():
        # Remove once the vllm-xpu-kernels fix for empty and non-pinned inputs
        # (vllm-project/vllm-xpu-kernels#513) is in a released package.
        if cpu_tensor.numel() == 0:
            return torch.empty(cpu_tensor.shape, dtype=cpu_tensor.dtype, device="xpu")
        if not cpu_tensor.is_pinned():
            pinned = torch.empty_strided(
                cpu_tensor.size(),
                cpu_tensor.stride(),
                dtype=cpu_tensor.dtype,
                device="cpu",
                pin_memory=True,
            )
            pinned.copy_(cpu_tensor)
            return torch.ops._C.get_xpu_view_from_cpu_tensor(pinned)
        return torch.ops._C.get_xpu_view_from_cpu_tensor(cpu_tensor)
    elif current_platform.is_cuda_alike():
        return torch.ops._C.get_cuda_view_from_cpu_tensor(cpu_tensor)
    else:
        raise ValueError(
            f"`get_accelerator_view_from_cpu_tensor` is currently "
            f"not supported in: {current_platform.device_name}"
        )


HAS_OPAQUE_TYPE = is_torch_equal_or_newer("2.11.0.dev")

# Allow toggling LayerName usage via environment variable.
# Defaults to True on torch >= 2.11, False otherwise.
# Set VLLM_USE_LAYERNAME=0 to disable even on torch >= 2.11.
_USE_LAYERNAME = HAS_OPAQUE_TYPE and envs.VLLM_USE_LAYERNAME

if HAS_OPAQUE_TYPE:
    from torch._opaque_base import OpaqueBase
else:
    OpaqueBase = object  # type: ignore[misc, assignment]


class LayerName(OpaqueBase):  # type: ignore[misc]
    """Wraps a module name string for use as a torch opaque type.

    When torch >= 2.11, this is registered as a hoisted value-type opaque
    object so that torch.compile lifts it as a graph input instead of baking
    it as a constant.  This avoids per-layer recompilation for custom ops
    that accept layer name strings (attention, MOE, KV cache, etc.).
    """

    def __init__(self, value: str):
        self.value = value

    def __eq__(self, other):
        return isinstance(other, LayerName) and self.value == other.value

    def __hash__(self):
        return hash(self.value)

    def __fx_repr__(self):
        return (f"LayerName({self.value!r})", {"LayerName": LayerName})


if HAS_OPAQUE_TYPE:
    from torch._library.opaque_object import register_opaque_type

    register_opaque_type(LayerName, typ="value", hoist=True)

# On torch >= 2.11 (with VLLM_USE_LAYERNAME enabled), custom op
# layer_name parameters use LayerName; otherwise they remain plain str.
if TYPE_CHECKING:
    from typing import TypeAlias

    LayerNameType: TypeAlias = str | LayerName
else:
    LayerNameType = LayerName if _USE_LAYERNAME else str


def _resolve_layer_name(layer_name: str | LayerName) -> str:
    """Unwrap a LayerName to str, or return str unchanged."""
    return layer_name.value if isinstance(layer_name, LayerName) else layer_name


def _encode_layer_name(layer_name: str) -> str | LayerName:
    """Wrap a str layer name as LayerName when enabled."""
    return LayerName(layer_name) if _USE_LAYERNAME else layer_name


# Supports XPU Graph with PyTorch versions >= 2.11.0.dev for XPU platform
def supports_xpu_graph() -> bool:
    return is_torch_equal_or_newer("2.11.0.dev")


# create a library to hold the custom op
vllm_lib = Library("vllm", "FRAGMENT")  # noqa


def direct_register_custom_op(
    op_name: str,
    op_func: Callable,
    mutates_args: list[str] | None = None,
    fake_impl: Callable | None = None,
    target_lib: Library | None = None,
    dispatch_key: str | None = None,
    tags: tuple[torch.Tag, ...] = (),
):
    """`torch.library.custom_op` can have significant overhead because it
    needs to consider complicated dispatching logic. This function
    directly registers a custom op and dispatches it to the CUDA backend.
    See https://gist.github.com/youkaichao/ecbea9ec9fc79a45d2adce1784d7a9a5
    for more details.

    By default, the custom op is registered to the vLLM library. If you
    want to register it to a different library, you can pass the library
    object to the `target_lib` argument.

    IMPORTANT: the lifetime of the operator is tied to the lifetime of the
    library object. If you want to bind the operator to a different library,
    make sure the library object is alive when the operator is used.
    """
    if mutates_args is None:
        mutates_args = []

    if dispatch_key is None:
        from vllm.platforms import current_platform

        dispatch_key = current_platform.dispatch_key

    schema_str = infer_schema(op_func, mutates_args=mutates_args)

    my_lib = target_lib or vllm_lib
    my_lib.define(op_name + schema_str, tags=tags)
    my_lib.impl(op_name, op_func, dispatch_key=dispatch_key)
    if fake_impl is not None:
        my_lib._register_fake(op_name, fake_impl)


def eager_bypass_custom_op(
    op_name: str,
    op_func: Callable,
    target_lib: Library | None = None,
) -> Callable:
    """Wrap a registered custom op so that only Dynamo tracing goes through
    the dispatcher, where the op is needed as a graph boundary; eager calls
    go straight to `op_func`. Use it on host-bound hot paths such as
    per-linear GEMM calls, where dispatch costs several µs per call."""
    op = getattr(getattr(torch.ops, (target_lib or vllm_lib).ns), op_name)

    def wrapper(*args, **kwargs):
        if torch.compiler.is_compiling():
            return op(*args, **kwargs)
        return op_func(*args, **kwargs)

    return wrapper


# Keep this at the end of the module: it resolves current_platform, which can
# load platform plugins that import from this (then partially initialized)
# module, so everything else here must already be defined.
PIN_MEMORY = is_pin_memory_available()
