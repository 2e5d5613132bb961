// Random number generators for musa devices, and storage resizing shared by
// the hooks and the native kernels.
#pragma once

#include <ATen/core/Generator.h>
#include <c10/core/StorageImpl.h>

namespace torch_musa {

const at::Generator& default_generator(c10::DeviceIndex device);
at::Generator new_generator(c10::DeviceIndex device);
// The host generator that carries a musa generator's state; host kernels draw
// from it, so a musa run and a CPU run seeded alike draw the same numbers.
at::Generator host_generator_of(const at::Generator& musa_generator);

void resize_storage_bytes(c10::StorageImpl* storage, size_t nbytes);

}  // namespace torch_musa
