import pytest
import torch
from hypothesis import HealthCheck, settings

# Fuzz inputs are tiny: intra-op threads only contend (a 4x slowdown on a
# loaded 2-core CI host), so tests run torch single-threaded, like the fuzzer.
torch.set_num_threads(1)

# The tests' own @given checks are judged on what they draw, never on how fast:
# no deadline and no too_slow health check, which fail a test when a busy host
# draws slowly (the fuzzer's own Hypothesis settings already turn both off).
# Loaded here, before the test modules build their @settings from this default.
settings.register_profile("syncfuzz-tests", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("syncfuzz-tests")


def pytest_report_header(config):
    return f"syncfuzz: torch {torch.__version__}, cuda available: {torch.cuda.is_available()}"


requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (GPU-only oracle)")
