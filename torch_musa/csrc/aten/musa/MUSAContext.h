// at::musa's stream and device functions, at the real torch_musa's path (what
// musa-converter makes of <ATen/cuda/CUDAContext.h>): code that calls
// at::musa::getCurrentMUSAStream() compiles unchanged. They are c10::musa's.
#pragma once

#include "core/Device.h"
#include "core/MUSAStream.h"

namespace at::musa {
using c10::musa::getCurrentMUSAStream;
using c10::musa::getDefaultMUSAStream;
using c10::musa::getStreamFromPool;
using c10::musa::MUSAStream;
using c10::musa::setCurrentMUSAStream;

inline c10::DeviceIndex getNumGPUs() { return c10::musa::device_count(); }
inline bool is_available() { return c10::musa::device_count() > 0; }
inline c10::DeviceIndex current_device() { return c10::musa::current_device(); }
}  // namespace at::musa
