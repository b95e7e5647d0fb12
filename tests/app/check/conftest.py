"""The NVML fixtures (fake libnvidia-ml.so.1 built with gcc) for the `check` tests too."""

from tests.sources.gpu.nvml.conftest import fake_nvml_dir

__all__ = ["fake_nvml_dir"]
