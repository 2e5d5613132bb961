"""Transitional: the configuration's fields under their old names (torch_musa.config is the source)."""
from torch_musa._runtime import configure as configure_runtime  # noqa: F401
from torch_musa.config import CONFIG

driver = CONFIG.driver
profile = CONFIG.profile
physical_indices = list(CONFIG.physical_indices)
device_count = CONFIG.device_count
capacity_bytes = CONFIG.capacity_bytes
host_limit_bytes = CONFIG.host_limit_bytes
