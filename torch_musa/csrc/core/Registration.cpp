// Registers the musa device when libtorch_musa is loaded, so that a C++ program
// linked against it (no Python) has the device: the "musa" name for
// PrivateUse1, the guard, the hooks and the allocator (MUSAHooks.cpp). The op
// kernels and the fallback register themselves (TORCH_LIBRARY_IMPL).
//
// The driver follows TORCH_MUSA_DRIVER ("host" when unset) and the device count
// MUSA_VISIBLE_DEVICES (host driver: as many devices as it lists; cuda driver: the
// GPUs CUDA then sees); everything else keeps
// RuntimeConfig's defaults (the default profile's) until `import torch_musa` hands over the
// configuration read from the environment (torch_musa/_runtime.py), which it
// may do until the runtime is first used.
//
// setup.py links this file last: its initializer then runs after every other
// one of the library (GNU ld keeps unprioritised initializers in link order).
#include "core/Device.h"

#include <c10/core/DeviceType.h>
#include <c10/util/Exception.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#ifdef TORCH_MUSA_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace torch_musa {

void register_device();  // MUSAHooks.cpp

namespace {

bool register_at_load() {
  try {
    const char* name = std::getenv("TORCH_MUSA_DRIVER");
    const std::string driver_name = name && *name ? name : "host";
    const char* visible = std::getenv("MUSA_VISIBLE_DEVICES");
#ifdef TORCH_MUSA_WITH_CUDA
    if (driver_name == "cuda") {
      // The GPUs CUDA sees (MUSA_VISIBLE_DEVICES narrows them, as under Python,
      // unless CUDA_VISIBLE_DEVICES is set already: an explicit CUDA setting wins).
      if (visible && !std::getenv("CUDA_VISIBLE_DEVICES"))
        setenv("CUDA_VISIBLE_DEVICES", visible, 0);
      int n = 0;
      if (cudaGetDeviceCount(&n) != cudaSuccess) n = 0;
      config().device_count = n < kMaxDevices ? n : kMaxDevices;
    }
#endif
    if (driver_name != "host") use_driver(driver_name);
    if (visible && driver_name == "host") {
      int n = 0;  // "" lists none; "1,0" two
      for (const char* p = visible; *p; ++p)
        if (*p != ',' && *p != ' ' && (p == visible || p[-1] == ',' || p[-1] == ' ')) ++n;
      config().device_count = n < kMaxDevices ? n : kMaxDevices;
    }
    register_device();
    c10::register_privateuse1_backend("musa");
    return true;
  } catch (const std::exception& e) {
    // An initializer must not throw (the process would abort before main).
    std::fprintf(stderr, "torch_musa: the musa device is not registered: %s\n", e.what());
    return false;
  }
}

[[maybe_unused]] const bool g_registered = register_at_load();

}  // namespace

}  // namespace torch_musa
