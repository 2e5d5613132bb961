// The musa device's plug-in to Kineto (torch's profiler back end), through
// PyTorch's PrivateUse1ProfilerRegistry: Kineto configures MusaActivityProfiler
// when a profile asks for ProfilerActivity.PrivateUse1 (ProfilerActivity.MUSA);
// its session records every op's kernel span (KernelCall, the outermost one per
// thread) with the correlation id of the CPU op that launched it, and on
// processTrace hands them to Kineto as CONCURRENT_KERNEL activities linked to
// that op. torch then counts them as PrivateUse1 device time of the op
// (self_device_time_total) and the chrome trace shows them on "musa N" /
// "stream S" rows, with the devices' properties in "deviceProperties".
//
// Under the host driver a kernel runs on the calling thread, so its span on the
// stream is the time the op's kernel took. A driver whose kernels are another
// device's (the cuda driver) records none: the activity types a PrivateUse1
// profile asks Kineto for are the ones its CUPTI profiler serves, so the GPU's
// own kernels and copies come linked to the launching op with their device time,
// and a launch span of ours beside each would count the op twice (an H200
// profile gave fused AdamW 5.0 ms of device time for 2.0 ms of kernels).
#include "core/MUSAProfiler.h"

#include "core/Device.h"
#include "core/MUSAStream.h"

#include <c10/util/Exception.h>

// torch's wheels ship Kineto: its headers under include/kineto, its symbols in
// libtorch_cpu. Extensions are built without USE_KINETO and without that folder
// on the include path, which torch's PrivateUse1ProfilerRegistry header needs,
// so the profiler is handed to Kineto's own registry (what that one calls).
// Kineto's metadata formats with fmt, whose compiled part torch keeps private:
// it is compiled here, hidden, from torch's fmt headers.
#if __has_include(<kineto/libkineto.h>)
#pragma GCC visibility push(hidden)
#define FMT_HEADER_ONLY
#include <fmt/format.h>
#pragma GCC visibility pop
#include <kineto/libkineto.h>
#define TORCH_MUSA_KINETO 1
#endif

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace torch_musa::profiler {

namespace detail {
std::atomic<bool> g_recording{false};
}

namespace {

struct KernelRecord {
  std::string name;
  c10::DeviceIndex device;
  c10::StreamId stream;
  int64_t start_ns;
  int64_t end_ns;
  uint64_t correlation;  // the launching CPU op's (0: none)
  uint64_t only_child;   // its one direct child op's, if it had exactly one
  int32_t tid;
  int64_t copy_bytes;  // -1: a kernel; else a memcpy of that many bytes
};

std::mutex g_mu;
std::vector<KernelRecord> g_records;  // the running session's
std::atomic<int64_t> g_count{0};

// Kineto pushes the correlation id of each CPU op on the thread that runs it.
thread_local std::vector<uint64_t> t_correlation;
thread_local int t_depth = 0;
// The op ids pushed directly under the op whose kernel runs (its host kernel
// re-enters the dispatcher: musa's aten::sum runs the CPU's aten::sum).
thread_local size_t t_kernel_base = SIZE_MAX;
thread_local uint64_t t_first_child = 0;
thread_local int t_children = 0;

int64_t unix_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

int32_t thread_id() {
  static std::atomic<int32_t> next{1};
  thread_local int32_t id = next++;
  return id;
}

}  // namespace

namespace detail {

int64_t kernel_begin() {
  if (t_depth++ > 0) return -1;  // nested: the outer call records
  t_kernel_base = t_correlation.size();
  t_first_child = 0;
  t_children = 0;
  return unix_ns();
}

namespace {
void record(std::string name, c10::DeviceIndex device, int64_t start_ns, int64_t copy_bytes) {
  --t_depth;
  if (start_ns < 0) return;
  const int64_t end = unix_ns();
  t_kernel_base = SIZE_MAX;
  if (!g_recording.load(std::memory_order_relaxed)) return;
  const c10::DeviceIndex d = device >= 0 ? device : current_device();
  KernelRecord r{std::move(name), d, current_stream(d).id(), start_ns, end,
                 t_correlation.empty() ? 0 : t_correlation.back(),
                 t_children == 1 ? t_first_child : 0, thread_id(), copy_bytes};
  std::lock_guard<std::mutex> g(g_mu);
  g_records.push_back(std::move(r));
  ++g_count;
}
}  // namespace

void kernel_end(const char* op, const char* overload, c10::DeviceIndex device,
                int64_t start_ns) {
  if (start_ns < 0) {
    --t_depth;
    return;
  }
  // Named apart from the op itself, as CUDA kernels are, so that the op's row
  // and its kernel's stay two rows of key_averages().
  std::string name = std::string("musa_kernel:") + op;
  if (overload && *overload) name += std::string(".") + overload;
  record(std::move(name), device, start_ns, -1);
}

void copy_end(const char* name, c10::DeviceIndex device, int64_t nbytes, int64_t start_ns) {
  record(start_ns < 0 ? std::string() : std::string(name), device, start_ns, nbytes);
}

}  // namespace detail

int64_t recorded_kernel_count() { return g_count.load(); }

#ifdef TORCH_MUSA_KINETO
namespace {

// Kineto pids for device rows: CUDA traces use the device index; musa uses the
// same so that viewers sort them as GPU rows.
int64_t device_pid(c10::DeviceIndex d) { return int64_t(d); }

std::string json_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

class MusaProfilerSession final : public libkineto::IActivityProfilerSession {
 public:
  explicit MusaProfilerSession(std::set<libkineto::ActivityType> types)
      : types_(std::move(types)) {}
  ~MusaProfilerSession() override {
    if (started_) stop();
  }

  void start() override {
    {
      std::lock_guard<std::mutex> g(g_mu);
      g_records.clear();
      g_count = 0;
    }
    started_ = true;
    detail::g_recording = config().kernel_type == c10::DeviceType::CPU;
    status_ = libkineto::TraceStatus::RECORDING;
  }
  void stop() override {
    detail::g_recording = false;
    started_ = false;
    std::lock_guard<std::mutex> g(g_mu);
    records_ = std::move(g_records);
    g_records.clear();
    status_ = libkineto::TraceStatus::PROCESSING;
  }
  std::vector<std::string> errors() override { return {}; }

  void processTrace(libkineto::ActivityLogger& logger) override {
    processTrace(logger, [](int32_t) -> const libkineto::ITraceActivity* { return nullptr; },
                 0, 0);
  }
  void processTrace(libkineto::ActivityLogger& logger,
                    libkineto::getLinkedActivityCallback linked, int64_t start_time,
                    int64_t end_time) override {
    buffer_ = std::make_unique<libkineto::CpuTraceBuffer>();
    buffer_->span = libkineto::TraceSpan(start_time, end_time, "musa");
    buffer_->gpuOpCount = int(records_.size());
    for (const KernelRecord& r : records_) {
      if (start_time && end_time && (r.start_ns < start_time || r.end_ns > end_time)) continue;
      const auto type = r.copy_bytes >= 0 ? libkineto::ActivityType::GPU_MEMCPY
                                          : libkineto::ActivityType::CONCURRENT_KERNEL;
      if (!types_.count(type)) continue;
      buffer_->emplace_activity(buffer_->span, type, r.name);
      auto& act = libkineto::CpuTraceBuffer::toRef(buffer_->activities.back());
      act.startTime = r.start_ns;
      act.endTime = std::max(r.end_ns, r.start_ns + 1);
      act.device = device_pid(r.device);
      act.resource = int32_t(r.stream);
      act.threadId = r.tid;
      uint64_t corr = r.correlation;
      act.linked = corr ? linked(int32_t(corr)) : nullptr;
      // torch's event tree folds an op into its only child of the same name
      // (keeping the child's kernels): link to that child then, as a CUDA
      // kernel launched from the innermost op would be.
      if (act.linked && r.only_child) {
        const libkineto::ITraceActivity* child = linked(int32_t(r.only_child));
        if (child && child->name() == act.linked->name()) {
          corr = r.only_child;
          act.linked = child;
        }
      }
      act.id = int32_t(corr);
      act.addMetadata("device", int(r.device));
      act.addMetadata("stream", int64_t(r.stream));
      act.addMetadata("correlation", int64_t(corr));
      if (r.copy_bytes >= 0) act.addMetadata("bytes", r.copy_bytes);
      streams_.insert({r.device, r.stream});
      act.log(logger);
    }
  }

  std::unique_ptr<libkineto::DeviceInfo> getDeviceInfo() override { return nullptr; }

  std::vector<libkineto::ResourceInfo> getResourceInfos() override {
    std::vector<libkineto::ResourceInfo> out;
    for (const auto& [d, s] : streams_)
      out.push_back({int64_t(s), int64_t(s), device_pid(d),
                     "musa stream " + std::to_string(s)});
    return out;
  }

  std::unique_ptr<libkineto::CpuTraceBuffer> getTraceBuffer() override {
    // Kineto keeps the buffer with the trace: the logged activities live there.
    return std::move(buffer_);
  }

  void pushCorrelationId(uint64_t id) override {
    if (t_correlation.size() == t_kernel_base && t_children++ == 0) t_first_child = id;
    t_correlation.push_back(id);
  }
  void popCorrelationId() override {
    if (!t_correlation.empty()) t_correlation.pop_back();
  }

  // The "deviceProperties" of the chrome trace, in the keys CUDA traces use.
  std::string getDeviceProperties() override {
    std::ostringstream os;
    const auto& cfg = config();
    for (int d = 0; d < int(device_count()); ++d) {
      if (d) os << ",";
      os << "{\"id\": " << d << ", \"name\": \"" << json_escape(cfg.profile)
         << "\", \"totalGlobalMem\": " << cfg.capacity_bytes
         << ", \"backend\": \"musa\", \"driver\": \"" << json_escape(driver().name())
         << "\"}";
    }
    return os.str();
  }

 private:
  std::set<libkineto::ActivityType> types_;
  std::vector<KernelRecord> records_;
  std::unique_ptr<libkineto::CpuTraceBuffer> buffer_;
  std::set<std::pair<c10::DeviceIndex, c10::StreamId>> streams_;
  bool started_ = false;
};

class MusaActivityProfiler final : public libkineto::IActivityProfiler {
 public:
  const std::string& name() const override { return name_; }
  const std::set<libkineto::ActivityType>& availableActivities() const override {
    return types_;
  }
  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      const std::set<libkineto::ActivityType>& activity_types,
      const libkineto::Config& /*config*/) override {
    std::set<libkineto::ActivityType> wanted;
    for (auto t : activity_types)
      if (types_.count(t)) wanted.insert(t);
    if (wanted.empty()) return nullptr;  // a CPU-only profile: nothing to do
    return std::make_unique<MusaProfilerSession>(std::move(wanted));
  }
  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      int64_t /*ts_ms*/, int64_t /*duration_ms*/,
      const std::set<libkineto::ActivityType>& activity_types,
      const libkineto::Config& config) override {
    return configure(activity_types, config);
  }

 private:
  std::string name_{"musa"};
  std::set<libkineto::ActivityType> types_{libkineto::ActivityType::CONCURRENT_KERNEL,
                                           libkineto::ActivityType::GPU_MEMCPY};
};

// Kineto asks each registered profiler for a session when a profile starts;
// registered at load, before any profile (a later one is added at once).
const bool registered = [] {
  libkineto::api().registerProfilerFactory(
      [] { return std::unique_ptr<libkineto::IActivityProfiler>(new MusaActivityProfiler()); });
  return true;
}();

}  // namespace
#endif  // TORCH_MUSA_KINETO

}  // namespace torch_musa::profiler
