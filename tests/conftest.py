import pytest
import torch


def pytest_report_header(config):
    return f"syncfuzz: torch {torch.__version__}, cuda available: {torch.cuda.is_available()}"


requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (GPU-only oracle)")
