"""Transitional: the environment is read by torch_musa.config."""
import os

from torch_musa.config import CONFIG
from torch_musa.config.runtime import cuda_driver_env  # noqa: F401
from torch_musa.config.variables import visible_devices as _visible


def driver_name():
    return CONFIG.driver


def visible_devices(physical):
    return list(_visible(os.environ.get("MUSA_VISIBLE_DEVICES"), physical))
