// C++ unit tests of the runtime's bottom layers: the host driver and the
// caching allocator, compiled with their sources into a module of their own
// (tests/cpp/test_runtime_cpp.py), so their state is separate from torch_musa._C.
// Each test returns "" when it passes, else what failed.
#include "core/Device.h"
#include "core/MUSACachingAllocator.h"
#include "core/MUSAStream.h"
#include "driver/Driver.h"

#include <torch/extension.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <thread>

namespace {

using namespace torch_musa;
using Clock = std::chrono::steady_clock;

struct Failure {
  std::string what;
};
#define EXPECT(cond, msg)                                                     \
  do {                                                                        \
    if (!(cond)) {                                                            \
      std::ostringstream os_;                                                 \
      os_ << __LINE__ << ": " << #cond << " -- " << msg;                      \
      throw Failure{os_.str()};                                               \
    }                                                                         \
  } while (0)

constexpr int64_t kMiB = int64_t(1) << 20;
constexpr double kGHz = 1e9;  // a clock at which a cycle is a nanosecond

void configure(int64_t capacity) {
  RuntimeConfig& c = config();
  c.device_count = 2;
  c.capacity_bytes = capacity;
  c.host_limit_bytes = 0;
  c.profile = "test";
}

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

c10::Stream stream(int id, c10::DeviceIndex d = 0) {
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(c10::DeviceType::PrivateUse1, d), id);
}

// ---- host driver -------------------------------------------------------------

void driver_memory_and_copies() {
  Driver& drv = driver();
  EXPECT(drv.name() == "host", "the default driver is " << drv.name());
  auto* a = static_cast<unsigned char*>(drv.malloc(0, 4096));
  auto* b = static_cast<unsigned char*>(drv.malloc(1, 4096));
  EXPECT(a && b && a != b, "two allocations");
  EXPECT(reinterpret_cast<uintptr_t>(a) % 64 == 0, "device memory is 64-byte aligned");
  for (int i = 0; i < 4096; ++i) a[i] = static_cast<unsigned char>(i * 7);
  drv.memcpy(b, a, 4096, stream(0));
  EXPECT(std::memcmp(a, b, 4096) == 0, "memcpy copies every byte");
  drv.free(0, a, 4096);
  drv.free(1, b, 4096);
}

void driver_stream_timeline() {
  Driver& drv = driver();
  const auto s = stream(1), other = stream(2);
  drv.stream_synchronize(s);
  const auto t0 = Clock::now();
  drv.stream_sleep(s, 60'000'000, kGHz);  // 60 ms of device time, queued
  EXPECT(ms_since(t0) < 30, "sleep is queued, not run on the caller");
  EXPECT(!drv.stream_query(s), "the stream is busy");
  EXPECT(drv.stream_query(other), "another stream is not");
  drv.stream_synchronize(s);
  EXPECT(ms_since(t0) >= 55, "synchronize waited " << ms_since(t0) << " ms");
  EXPECT(drv.stream_query(s), "idle after synchronize");
}

void driver_events_time_and_order() {
  Driver& drv = driver();
  const auto s = stream(3), waiter = stream(4);
  DriverEvent* start = drv.event_create(0, /*timing=*/true);
  DriverEvent* end = drv.event_create(0, /*timing=*/true);
  drv.event_record(start, s);
  drv.stream_sleep(s, 40'000'000, kGHz);
  drv.event_record(end, s);
  EXPECT(!drv.event_query(end), "the end event waits for the sleep");
  drv.stream_wait_event(waiter, end);
  EXPECT(!drv.stream_query(waiter), "a stream waiting on the event is busy too");
  drv.event_synchronize(end);
  EXPECT(drv.event_query(end) && drv.stream_query(waiter), "done after the event");
  const double ms = drv.event_elapsed_ms(start, end);
  EXPECT(ms >= 35 && ms < 200, "elapsed " << ms << " ms for a 40 ms sleep");
  DriverEvent* plain = drv.event_create(0, /*timing=*/false);
  drv.event_record(plain, s);
  bool raised = false;
  try {
    drv.event_elapsed_ms(start, plain);
  } catch (const c10::Error& e) {
    raised = std::string(e.what()).find("enable_timing=True") != std::string::npos;
  }
  EXPECT(raised, "elapsed time without timing names enable_timing");
  for (DriverEvent* e : {start, end, plain}) drv.event_destroy(e);
}

void driver_device_synchronize_waits_for_every_stream() {
  Driver& drv = driver();
  drv.stream_sleep(stream(5, 1), 30'000'000, kGHz);
  drv.stream_sleep(stream(6, 1), 50'000'000, kGHz);
  const auto t0 = Clock::now();
  drv.device_synchronize(1);
  EXPECT(ms_since(t0) >= 40, "device_synchronize waited " << ms_since(t0) << " ms");
  EXPECT(drv.stream_query(stream(5, 1)) && drv.stream_query(stream(6, 1)), "all idle");
}

// ---- caching allocator ---------------------------------------------------------

c10::CachingDeviceAllocator::DeviceStats stats(c10::DeviceIndex d = 0) {
  return device_allocator().getDeviceStats(d);
}

void allocator_rounds_counts_and_caches() {
  configure(64 * kMiB);
  DeviceAllocator& a = device_allocator();
  a.emptyCache();
  void* first;
  {
    c10::DataPtr p = a.allocate_on(0, 1000, c10::Device(c10::DeviceType::PrivateUse1, 0));
    first = p.get();
    EXPECT(a.owns(p), "the allocator owns its blocks");
    EXPECT(a.device_of(first) == 0, "device_of names the device");
    auto s = stats();
    EXPECT(s.allocated_bytes[0].current == 1024, "1000 B is a 1024 B class, got "
                                                     << s.allocated_bytes[0].current);
    EXPECT(s.requested_bytes[0].current == 1000, "requested bytes are what was asked");
  }
  auto s = stats();
  EXPECT(s.allocated_bytes[0].current == 0 && s.reserved_bytes[0].current == 2 * kMiB,
         "a freed block stays reserved (cached) in its 2 MiB small-pool segment, as CUDA's");
  c10::DataPtr again = a.allocate_on(0, 900, c10::Device(c10::DeviceType::PrivateUse1, 0));
  EXPECT(again.get() == first, "the same class reuses the cached block");
  again.clear();
  a.emptyCache();
  EXPECT(stats().reserved_bytes[0].current == 0, "empty_cache returns cached blocks");
  int foreign = 0;
  EXPECT(a.device_of(&foreign) == -1, "a host pointer is not musa memory");
}

void allocator_out_of_memory_is_clear_and_recoverable() {
  configure(64 * kMiB);
  DeviceAllocator& a = device_allocator();
  a.emptyCache();
  c10::DataPtr big = a.allocate_on(0, 40 * kMiB, c10::Device(c10::DeviceType::PrivateUse1, 0));
  std::string msg;
  try {
    a.allocate_on(0, 30 * kMiB, c10::Device(c10::DeviceType::PrivateUse1, 0));
  } catch (const c10::OutOfMemoryError& e) {
    msg = e.what();
  }
  EXPECT(msg.find("out of memory") != std::string::npos && msg.find("musa:0") != std::string::npos,
         "OOM names the device: " << msg);
  EXPECT(stats().num_ooms == 1, "the OOM is counted");
  big.clear();
  c10::DataPtr ok = a.allocate_on(0, 30 * kMiB, c10::Device(c10::DeviceType::PrivateUse1, 0));
  EXPECT(ok.get() != nullptr, "usable after the OOM once memory is freed");
  EXPECT(stats(1).allocated_bytes[0].current == 0, "devices are accounted apart");
  ok.clear();
  a.emptyCache();
  a.resetAccumulatedStats(0);
}

void allocator_fraction_and_split_limit() {
  configure(64 * kMiB);
  DeviceAllocator& a = device_allocator();
  a.emptyCache();
  a.set_memory_fraction(0.25, 0);  // 16 MiB
  bool raised = false;
  try {
    a.allocate_on(0, 17 * kMiB, c10::Device(c10::DeviceType::PrivateUse1, 0));
  } catch (const c10::OutOfMemoryError& e) {
    raised = std::string(e.what()).find("set_per_process_memory_fraction") != std::string::npos;
  }
  EXPECT(raised, "the fraction limits the device and the error says so");
  a.set_memory_fraction(1.0, 0);
  AllocatorSettings settings;
  settings.max_split_size = 2 * kMiB;
  a.set_settings(settings);
  // 3 MiB takes a 20 MiB large-pool segment, as on CUDA; at or above max_split_size it
  // is an oversize segment: cached whole, never split, released by empty_cache.
  a.allocate_on(0, 3 * kMiB, c10::Device(c10::DeviceType::PrivateUse1, 0)).clear();
  EXPECT(stats().reserved_bytes[0].current == 20 * kMiB && stats().oversize_segments.current == 1,
         "an oversize segment stays cached whole, got reserved "
             << stats().reserved_bytes[0].current << ", oversize " << stats().oversize_segments.current);
  a.emptyCache();
  EXPECT(stats().reserved_bytes[0].current == 0 && stats().oversize_segments.current == 0,
         "empty_cache releases it");
  a.set_settings(AllocatorSettings{});
  raised = false;
  try {
    a.set_memory_fraction(1.5, 0);
  } catch (const c10::Error&) {
    raised = true;
  }
  EXPECT(raised, "a fraction above 1 is refused");
}

const std::map<std::string, std::function<void()>>& tests() {
  static const std::map<std::string, std::function<void()>> t = {
      {"driver_memory_and_copies", driver_memory_and_copies},
      {"driver_stream_timeline", driver_stream_timeline},
      {"driver_events_time_and_order", driver_events_time_and_order},
      {"driver_device_synchronize_waits_for_every_stream",
       driver_device_synchronize_waits_for_every_stream},
      {"allocator_rounds_counts_and_caches", allocator_rounds_counts_and_caches},
      {"allocator_out_of_memory_is_clear_and_recoverable",
       allocator_out_of_memory_is_clear_and_recoverable},
      {"allocator_fraction_and_split_limit", allocator_fraction_and_split_limit},
  };
  return t;
}

std::string run(const std::string& name) {
  configure(64 * kMiB);
  try {
    tests().at(name)();
  } catch (const Failure& f) {
    return f.what;
  }
  return "";
}

std::vector<std::string> names() {
  std::vector<std::string> out;
  for (const auto& [n, f] : tests()) out.push_back(n);
  return out;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("names", &names);
  m.def("run", &run);
}
