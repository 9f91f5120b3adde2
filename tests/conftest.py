import pytest
import torch

# Fuzz inputs are tiny: intra-op threads only contend (a 4x slowdown on a
# loaded 2-core CI host), so tests run torch single-threaded, like the fuzzer.
torch.set_num_threads(1)


def pytest_report_header(config):
    return f"syncfuzz: torch {torch.__version__}, cuda available: {torch.cuda.is_available()}"


requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (GPU-only oracle)")
