"""Transitional: the hardware profiles live in torch_musa.config.profiles."""
from torch_musa.config import CONFIG
from torch_musa.config.profiles import DEFAULT_PROFILE, PROFILES, HardwareProfile, gpu_profile  # noqa: F401


def selected_profile(driver=None):
    return CONFIG.profile
