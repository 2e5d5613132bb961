// musa events for C++ code (the real torch_musa's at::musa::MUSAEvent, as
// CUDA's at::cuda::CUDAEvent): record on a stream, make another stream wait,
// query, synchronize, time. A c10::Event of the musa device underneath, so the
// driver's events serve it (MUSAGuardImpl).
#pragma once

#include "core/MUSAStream.h"

#include <c10/core/Event.h>

namespace at::musa {

class MUSAEvent {
 public:
  explicit MUSAEvent(bool enable_timing = false)
      : event_(c10::DeviceType::PrivateUse1,
               enable_timing ? c10::EventFlag::BACKEND_DEFAULT : c10::EventFlag::PYTORCH_DEFAULT) {}
  MUSAEvent(const MUSAEvent&) = delete;
  MUSAEvent& operator=(const MUSAEvent&) = delete;
  MUSAEvent(MUSAEvent&&) noexcept = default;
  MUSAEvent& operator=(MUSAEvent&&) noexcept = default;

  // On the current stream of the current device, or on `stream`.
  void record() { record(c10::musa::getCurrentMUSAStream()); }
  void record(const c10::musa::MUSAStream& stream) { event_.record(stream.unwrap()); }
  // `stream` waits (on the device) until the recorded work completes.
  void block(const c10::musa::MUSAStream& stream) { event_.block(stream.unwrap()); }
  bool query() const { return event_.query(); }
  void synchronize() const { event_.synchronize(); }
  // Milliseconds from this event to `end` (both created with enable_timing).
  float elapsed_time(const MUSAEvent& end) const {
    return static_cast<float>(event_.elapsedTime(end.event_));
  }
  bool isCreated() const { return event_.was_marked_for_recording(); }
  c10::DeviceIndex device_index() const { return event_.device_index(); }

 private:
  c10::Event event_;
};

}  // namespace at::musa
