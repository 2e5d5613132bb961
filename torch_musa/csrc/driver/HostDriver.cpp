// The host driver: device memory is host RAM, kernels already ran on the CPU
// by the time they are "enqueued", and each stream keeps a timeline (the time
// at which its queued work completes). Work that only occupies a stream, such
// as `_sleep`, advances the timeline without blocking the caller, so queries,
// events, waits and elapsed times come out as on an asynchronous device.
#include "driver/Driver.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <atomic>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace torch_musa {

struct DriverEvent {
  c10::DeviceIndex device;
  bool timing;
  bool recorded = false;
  int64_t when_ns = 0;  // completion time of the work recorded before it
};

namespace {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::atomic<WaitInterruptCheck> g_interrupt_check{nullptr};
constexpr int64_t kCheckEveryNs = 20'000'000;  // how often a wait calls the check

// Waits until `t` on the steady clock: sleeps in slices, then yields for the last
// 100 us. Every kCheckEveryNs the interrupt check may abandon the wait (Driver.h).
void wait_until(int64_t t) {
  int64_t now = now_ns();
  int64_t check_at = now + kCheckEveryNs;
  for (int64_t left = t - now; left > 0; left = t - now) {
    if (left > 200000) {
      std::this_thread::sleep_for(
          std::chrono::nanoseconds(std::min(left - 100000, check_at - now)));
    } else {
      std::this_thread::yield();
    }
    now = now_ns();
    if (now >= check_at && now < t) {
      if (WaitInterruptCheck check = g_interrupt_check.load(std::memory_order_acquire))
        check();
      now = now_ns();
      check_at = now + kCheckEveryNs;
    }
  }
}

class HostDriver final : public Driver {
 public:
  std::string name() const override { return "host"; }
  bool waits_check_interrupts() const override { return true; }

  void* malloc(c10::DeviceIndex, size_t nbytes) override {
    void* p = nullptr;
    // 512-byte alignment, as device allocators give; also satisfies the
    // 64-byte alignment that host kernels expect.
    if (posix_memalign(&p, 512, std::max<size_t>(nbytes, 1)) != 0) return nullptr;
    return p;
  }
  void free(c10::DeviceIndex, void* ptr, size_t) override { std::free(ptr); }
  void* malloc_host(size_t nbytes) override {
    void* p = nullptr;
    if (posix_memalign(&p, 4096, std::max<size_t>(nbytes, 1)) != 0) return nullptr;
    return p;
  }
  void free_host(void* ptr) override { std::free(ptr); }

  void memcpy(void* dst, const void* src, size_t nbytes, c10::Stream) override {
    if (nbytes) std::memcpy(dst, src, nbytes);
  }

  void stream_sleep(c10::Stream stream, int64_t cycles, double clock_hz) override {
    const auto ns = int64_t(double(cycles) / clock_hz * 1e9);
    if (ns <= 0) return;  // as CUDA's spin for a negative count: no work at all
    g_host_work_queued.store(true, std::memory_order_relaxed);
    std::lock_guard<std::mutex> g(mu_);
    int64_t& ready = ready_[key(stream)];
    ready = std::max(ready, now_ns()) + ns;
  }
  bool stream_query(c10::Stream stream) override {
    check_capture_stream(stream, "querying");
    return ready_at(stream) <= now_ns();
  }
  void stream_synchronize(c10::Stream stream) override {
    check_capture_stream(stream, "synchronizing");
    wait_until(ready_at(stream));
  }
  void device_synchronize(c10::DeviceIndex device) override {
    check_capture_device(device);
    int64_t latest = 0;
    {
      std::lock_guard<std::mutex> g(mu_);
      for (const auto& [k, t] : ready_)
        if (k.first == device) latest = std::max(latest, t);
    }
    wait_until(latest);
  }
  // Kernels already ran; what a host read waits for is the stream's timeline.
  void host_read_wait(c10::Stream stream) override { wait_until(ready_at(stream)); }
  void stream_wait_event(c10::Stream waiter, DriverEvent* event) override {
    if (!event->recorded) return;
    std::lock_guard<std::mutex> g(mu_);
    int64_t& ready = ready_[key(waiter)];
    ready = std::max(ready, event->when_ns);
  }

  // ---- Graph capture (Driver.h).
  void capture_begin(c10::Stream stream, int mode) override {
    TORCH_CHECK(mode >= 0 && mode <= 2, "capture_error_mode must be 0 (global), 1 "
                "(thread_local) or 2 (relaxed), got ", mode);
    TORCH_CHECK(stream.id() != 0,
                "MUSA graphs must be captured on a non-default stream. (However, after "
                "capture, it's ok to replay them on the default stream.)");
    std::lock_guard<std::mutex> g(capture_mu_);
    TORCH_CHECK(!find_capture(stream), "stream ", stream.id(), " of musa:",
                int(stream.device_index()),
                " is already capturing a MUSA graph; end that capture first");
    captures_.push_back({stream, mode, std::this_thread::get_id(), {}, {}});
    ++capture_count_;
  }
  std::string capture_end(c10::Stream stream) override {
    std::lock_guard<std::mutex> g(capture_mu_);
    for (auto it = captures_.begin(); it != captures_.end(); ++it) {
      if (it->stream != stream) continue;
      std::string error = std::move(it->error);
      captures_.erase(it);
      --capture_count_;
      return error;
    }
    TORCH_CHECK(false, "capture_end: stream ", stream.id(), " of musa:",
                int(stream.device_index()), " is not capturing a MUSA graph");
  }
  bool stream_capturing(c10::Stream stream) override {
    if (capture_count_.load(std::memory_order_relaxed) == 0) return false;
    std::lock_guard<std::mutex> g(capture_mu_);
    return find_capture(stream) != nullptr;
  }
  void capture_invalidate(c10::Stream stream, const std::string& error) override {
    std::lock_guard<std::mutex> g(capture_mu_);
    if (Capture* c = find_capture(stream))
      if (c->error.empty()) c->error = error;
  }

  DriverEvent* event_create(c10::DeviceIndex device, bool timing) override {
    return new DriverEvent{device, timing};
  }
  void event_destroy(DriverEvent* event) override {
    forget_captured_event(event);
    delete event;
  }
  void event_record(DriverEvent* event, c10::Stream stream) override {
    TORCH_CHECK(event->device == stream.device_index(),
                "Event was created on musa:", int(event->device),
                " but is being recorded on a stream of musa:",
                int(stream.device_index()));
    event->when_ns = std::max(now_ns(), ready_at(stream));
    event->recorded = true;
    note_captured_event(event, stream);
  }
  bool event_query(DriverEvent* event) override {
    check_capture_event(event, "querying");
    return !event->recorded || event->when_ns <= now_ns();
  }
  void event_synchronize(DriverEvent* event) override {
    check_capture_event(event, "synchronizing");
    if (event->recorded) wait_until(event->when_ns);
  }
  double event_elapsed_ms(DriverEvent* start, DriverEvent* end) override {
    check_elapsed_time(start->timing && end->timing, start->recorded && end->recorded,
                       event_query(start) && event_query(end));
    return double(end->when_ns - start->when_ns) / 1e6;
  }

 private:
  using Key = std::pair<int, int64_t>;
  static Key key(c10::Stream s) { return {s.device_index(), s.id()}; }
  int64_t ready_at(c10::Stream s) {
    std::lock_guard<std::mutex> g(mu_);
    auto it = ready_.find(key(s));
    return it == ready_.end() ? 0 : it->second;
  }
  std::mutex mu_;
  std::map<Key, int64_t> ready_;

  struct Capture {
    c10::Stream stream;
    int mode;
    std::thread::id thread;
    std::string error;                    // the first refused call, if any
    std::set<const DriverEvent*> events;  // recorded on the stream during capture
  };
  std::mutex capture_mu_;
  std::vector<Capture> captures_;         // under capture_mu_
  std::atomic<int> capture_count_{0};     // the fast path: nothing captures

  Capture* find_capture(c10::Stream s) {
    for (Capture& c : captures_)
      if (c.stream == s) return &c;
    return nullptr;
  }
  [[noreturn]] static void refuse(Capture& c, const std::string& what) {
    static const char* modes[] = {"global", "thread_local", "relaxed"};
    std::string msg =
        "musa error: operation not permitted when stream is capturing: " + what +
        " while stream " + std::to_string(c.stream.id()) + " of musa:" +
        std::to_string(int(c.stream.device_index())) + " captures a MUSA graph "
        "(capture_error_mode='" + modes[c.mode] + "'). Synchronising, .item(), copies "
        "to the CPU and blocking waits on captured work are not allowed during capture; "
        "do them before capture begins or after it ends.";
    if (c.error.empty()) c.error = msg;
    TORCH_CHECK(false, msg);
  }
  void check_capture_stream(c10::Stream s, const char* verb) {
    if (capture_count_.load(std::memory_order_relaxed) == 0) return;
    std::lock_guard<std::mutex> g(capture_mu_);
    if (Capture* c = find_capture(s)) refuse(*c, std::string(verb) + " the capturing stream");
  }
  void check_capture_device(c10::DeviceIndex d) {
    if (capture_count_.load(std::memory_order_relaxed) == 0) return;
    std::lock_guard<std::mutex> g(capture_mu_);
    for (Capture& c : captures_)
      if (c.stream.device_index() == d &&
          (c.mode == 0 || (c.mode == 1 && c.thread == std::this_thread::get_id())))
        refuse(c, "synchronizing the device");
  }
  void note_captured_event(const DriverEvent* e, c10::Stream s) {
    if (capture_count_.load(std::memory_order_relaxed) == 0) return;
    std::lock_guard<std::mutex> g(capture_mu_);
    if (Capture* c = find_capture(s)) c->events.insert(e);
  }
  void check_capture_event(const DriverEvent* e, const char* verb) {
    if (capture_count_.load(std::memory_order_relaxed) == 0) return;
    std::lock_guard<std::mutex> g(capture_mu_);
    for (Capture& c : captures_)
      if (c.events.count(e)) refuse(c, std::string(verb) + " an event recorded during capture");
  }
  void forget_captured_event(const DriverEvent* e) {
    if (capture_count_.load(std::memory_order_relaxed) == 0) return;
    std::lock_guard<std::mutex> g(capture_mu_);
    for (Capture& c : captures_) c.events.erase(e);
  }
};

}  // namespace

Driver& host_driver() {
  static HostDriver host;
  return host;
}

void set_wait_interrupt_check(WaitInterruptCheck check) {
  g_interrupt_check.store(check, std::memory_order_release);
}

}  // namespace torch_musa
