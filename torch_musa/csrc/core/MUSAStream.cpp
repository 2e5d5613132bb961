#include "core/MUSAStream.h"

#include <array>
#include <atomic>

namespace torch_musa {

namespace {
TORCH_MUSA_FAST_TLS thread_local std::array<c10::StreamId, kMaxDevices> t_stream{};  // all default
std::array<std::atomic<uint32_t>, kMaxDevices * 2> g_pool_cursor{};
}  // namespace

c10::Stream default_stream(c10::DeviceIndex index) {
  return c10::Stream(c10::Stream::UNSAFE,
                     c10::Device(c10::DeviceType::PrivateUse1, index), 0);
}

c10::Stream current_stream(c10::DeviceIndex index) {
  return c10::Stream(c10::Stream::UNSAFE,
                     c10::Device(c10::DeviceType::PrivateUse1, index),
                     C10_UNLIKELY(config().native_streams)
                         ? driver().current_stream_id(index)
                         : t_stream[index]);
}

void set_current_stream(c10::Stream stream) {
  check_device(stream.device_index());
  if (C10_UNLIKELY(config().native_streams))
    driver().set_current_stream_id(stream.device_index(), stream.id());
  t_stream[stream.device_index()] = stream.id();
}

c10::Stream pool_stream(c10::DeviceIndex index, int priority) {
  check_device(index);
  if (C10_UNLIKELY(config().native_streams))
    return c10::Stream(c10::Stream::UNSAFE,
                       c10::Device(c10::DeviceType::PrivateUse1, index),
                       driver().pool_stream_id(index, priority < 0));
  // Two priorities, as on CUDA: 0 (normal) and anything below 0 (high).
  const int high = priority < 0 ? 1 : 0;
  const uint32_t k = g_pool_cursor[index * 2 + high]++ % kStreamsPerPool;
  return c10::Stream(c10::Stream::UNSAFE,
                     c10::Device(c10::DeviceType::PrivateUse1, index),
                     1 + high * kStreamsPerPool + k);
}

}  // namespace torch_musa
