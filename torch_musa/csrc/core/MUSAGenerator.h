// Random number generators for musa devices.
#pragma once

#include <ATen/core/Generator.h>
#include <c10/core/StorageImpl.h>

namespace torch_musa {

const at::Generator& default_generator(c10::DeviceIndex device);
at::Generator new_generator(c10::DeviceIndex device);
// The host generator that carries a musa generator's state; host kernels draw
// from it, so a musa run and a CPU run seeded alike draw the same numbers.
at::Generator kernel_generator_of(const at::Generator& musa_generator);


}  // namespace torch_musa
