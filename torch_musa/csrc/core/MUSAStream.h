// Streams of each device: the default stream, the current stream of each
// thread, and the pools that new streams come from.
#pragma once

#include "core/Device.h"

#include <c10/core/Stream.h>

namespace torch_musa {

// Streams: id 0 is the default stream; pool ids follow; other ids are
// external streams handed in by the user.
constexpr int kStreamsPerPool = 32;
c10::Stream default_stream(c10::DeviceIndex index);
c10::Stream current_stream(c10::DeviceIndex index);
void set_current_stream(c10::Stream stream);
c10::Stream pool_stream(c10::DeviceIndex index, int priority);

}  // namespace torch_musa
