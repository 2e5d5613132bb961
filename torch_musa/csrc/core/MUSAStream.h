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

// ---- The real torch_musa's C++ stream API (CUDA's CUDAStream, spelt MUSA) ----
namespace c10::musa {

// A stream of a musa device: a c10::Stream known to be musa's.
class MUSAStream {
 public:
  enum Unchecked { UNCHECKED };
  explicit MUSAStream(c10::Stream stream) : stream_(stream) {
    TORCH_CHECK(stream_.device_type() == c10::DeviceType::PrivateUse1,
                "MUSAStream expects a musa stream, got a stream of ", stream_.device());
  }
  MUSAStream(Unchecked, c10::Stream stream) : stream_(stream) {}

  bool operator==(const MUSAStream& other) const noexcept { return stream_ == other.stream_; }
  bool operator!=(const MUSAStream& other) const noexcept { return stream_ != other.stream_; }
  operator c10::Stream() const { return stream_; }  // NOLINT: as CUDAStream converts

  c10::Stream unwrap() const { return stream_; }
  c10::Device device() const { return stream_.device(); }
  c10::DeviceIndex device_index() const { return stream_.device_index(); }
  c10::StreamId id() const { return stream_.id(); }
  // The driver's handle (a cudaStream_t under the cuda driver).
  void* stream() const { return torch_musa::driver().stream_handle(stream_); }
#if defined(__CUDACC__)
  // MUSA C compiled as CUDA (the cuda driver's .mu sources): the stream as its CUDA
  // handle, which `musaStream_t s = getCurrentMUSAStream();` there expects.
  operator cudaStream_t() const { return static_cast<cudaStream_t>(stream()); }
#endif
  bool query() const { return stream_.query(); }
  void synchronize() const { stream_.synchronize(); }

 private:
  c10::Stream stream_;
};

namespace detail {
inline c10::DeviceIndex device_or_current(c10::DeviceIndex device) {
  const c10::DeviceIndex d = device < 0 ? torch_musa::current_device() : device;
  torch_musa::check_device(d);
  return d;
}
}  // namespace detail

// `device` -1: the current device.
inline MUSAStream getCurrentMUSAStream(c10::DeviceIndex device = -1) {
  return MUSAStream(MUSAStream::UNCHECKED,
                    torch_musa::current_stream(detail::device_or_current(device)));
}
inline MUSAStream getDefaultMUSAStream(c10::DeviceIndex device = -1) {
  return MUSAStream(MUSAStream::UNCHECKED,
                    torch_musa::default_stream(detail::device_or_current(device)));
}
inline MUSAStream getStreamFromPool(bool isHighPriority = false, c10::DeviceIndex device = -1) {
  return MUSAStream(MUSAStream::UNCHECKED,
                    torch_musa::pool_stream(detail::device_or_current(device),
                                            isHighPriority ? -1 : 0));
}
// The current stream of the stream's device (the current device stays).
inline void setCurrentMUSAStream(MUSAStream stream) {
  torch_musa::set_current_stream(stream.unwrap());
}

}  // namespace c10::musa
