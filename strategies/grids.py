"""Vision grids ``[t, h, w]`` as the multimodal processors produce them."""

from __future__ import annotations

from functools import lru_cache

from hypothesis import strategies as st

from fuzz.api import HarnessError


@lru_cache(maxsize=None)  # built once per shape of grid (strategies.common says why)
def grid_thws(
    *, min_size: int = 0, max_size: int = 3, max_t: int = 3, max_hw: int = 8, merge: int = 2
) -> st.SearchStrategy[list[list[int]]]:
    """Lists of ``[t, h, w]`` grids with ``h``, ``w`` multiples of ``merge``
    (as upstream's patch merger requires); ``t > 1`` and ``h != w`` included."""
    if merge < 1 or max_hw < merge or max_t < 1 or min_size < 0 or max_size < min_size:
        raise HarnessError("grid_thws: need merge >= 1, max_hw >= merge, max_t >= 1, 0 <= min_size <= max_size")
    side = st.integers(1, max_hw // merge).map(lambda k: k * merge)
    grid = st.tuples(st.integers(1, max_t), side, side).map(list)
    return st.lists(grid, min_size=min_size, max_size=max_size)
