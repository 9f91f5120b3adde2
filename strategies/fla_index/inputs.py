"""``cu_seqlens`` inputs for the flash-linear-attention index helpers (``legacy/`` and
``optimized/fla_index.py``), and the ``cu_seqlens()`` / ``chunk_sizes()`` factories
(exported from ``strategies``)."""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Callable, Sequence

import torch
from hypothesis import strategies as st

from fuzz.api import HarnessError, Impl
from strategies.common import INT_DTYPES, devices, fixed_dict, int_dtypes


@lru_cache(maxsize=None)  # built once per set of arguments: strategies/common.py says why
def cu_seqlens(
    *, max_sequences: int = 8, max_length: int = 300, monotone: bool = True, empty_only_at_end: bool = False
) -> st.SearchStrategy[list[int]]:
    """Cumulative sequence lengths starting at 0: empty sequences, a single
    sequence and no sequence at all (``[0]``) included. With
    ``monotone=False`` (the wide contract) lengths may be negative. With
    ``empty_only_at_end`` empty sequences come after every non-empty one, as
    vLLM's batches have them: each scheduled request has a token, and the
    empty requests a CUDA graph pads the batch with are appended at the end."""
    if max_sequences < 0 or max_length < 0:
        raise HarnessError("cu_seqlens: max_sequences and max_length must be >= 0")
    low = 0 if monotone else -max_length
    lengths = st.lists(st.integers(low, max_length), min_size=0, max_size=max_sequences)
    if empty_only_at_end:
        lengths = lengths.map(lambda lens: [n for n in lens if n] + [n for n in lens if not n])

    def running_sum(lens: list[int]) -> list[int]:
        out = [0]
        for n in lens:
            out.append(out[-1] + n)
        return out

    return lengths.map(running_sum)


@lru_cache(maxsize=None)
def chunk_sizes(max_size: int = 512) -> st.SearchStrategy[int]:
    """Chunk sizes from 1 up to past any drawn sequence (FLA uses 64)."""
    if max_size < 1:
        raise HarnessError("chunk_sizes: max_size must be >= 1")
    return st.one_of(st.integers(1, 8), st.sampled_from([16, 32, 64]), st.integers(1, max_size))


class ChunkIndexInputs:
    """Inputs of ``prepare_chunk_indices(cu_seqlens, chunk_size)`` and
    ``prepare_chunk_offsets(cu_seqlens, chunk_size)``.

    Callers build ``cu_seqlens`` as an int32 device tensor; int64 is accepted
    too, and empty sequences only as trailing padding. The wide contract adds
    empty sequences anywhere (F16: both releases' chunk indices name the wrong
    sequence after one) and non-monotone ``cu_seqlens``.
    """

    def specs(self, available: Sequence[str], contract: str) -> st.SearchStrategy[dict]:
        return fixed_dict(
            {
                "device": devices(available),
                "cu_seqlens": cu_seqlens(empty_only_at_end=True) if contract == "caller" else st.one_of(
                    # Half the wide draws are running sums (empty sequences anywhere: F16), half are not.
                    cu_seqlens(), cu_seqlens(monotone=False)),
                "dtype": int_dtypes(),
                "chunk_size": chunk_sizes(),
            }
        )

    def materialize(self, spec: dict, impl: Impl, side: str) -> Callable[[], Any]:
        cu = torch.tensor(spec["cu_seqlens"], dtype=INT_DTYPES[spec["dtype"]], device=spec["device"])
        chunk_size = spec["chunk_size"]
        return lambda: impl.function(cu, chunk_size)
