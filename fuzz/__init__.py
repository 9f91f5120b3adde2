"""syncfuzz: differential equivalence fuzzer for vLLM's GPU sync-removal refactors.

``python -m fuzz list | run | replay`` -- see README.md.
"""

from fuzz.versions import FUZZ_VERSION as __version__

__all__ = ["__version__"]
