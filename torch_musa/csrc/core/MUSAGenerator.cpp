#include "core/MUSAGenerator.h"

#include "core/MUSACachingAllocator.h"
#include "core/Device.h"
#include "core/MUSAStream.h"

#include <c10/core/GeneratorImpl.h>

#include <algorithm>
#include <deque>
#include <mutex>

namespace torch_musa {

namespace {

// A musa-tagged generator whose state lives in a generator of the kernels'
// device type (host mt19937, or CUDA Philox under the cuda driver).
struct MusaGeneratorImpl final : c10::GeneratorImpl {
  explicit MusaGeneratorImpl(c10::DeviceIndex d, at::Generator host)
      : c10::GeneratorImpl(c10::Device(c10::DeviceType::PrivateUse1, d),
                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
        host_(std::move(host)) {}

  void set_current_seed(uint64_t seed) override { host_.set_current_seed(seed); }
  void set_offset(uint64_t offset) override { host_.set_offset(offset); }
  uint64_t get_offset() const override { return host_.get_offset(); }
  uint64_t current_seed() const override { return host_.current_seed(); }
  uint64_t seed() override { return host_.seed(); }
  void set_state(const c10::TensorImpl& state) override {
    host_.unsafeGetGeneratorImpl()->set_state(state);
  }
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override {
    return host_.unsafeGetGeneratorImpl()->get_state();
  }
  const at::Generator& host() const { return host_; }

 private:
  MusaGeneratorImpl* clone_impl() const override {
    return new MusaGeneratorImpl(device().index(), host_.clone());
  }
  at::Generator host_;
};

at::Generator make(c10::DeviceIndex d, uint64_t seed) {
  return at::make_generator<MusaGeneratorImpl>(d, driver().kernel_generator(d, seed));
}

}  // namespace

const at::Generator& default_generator(c10::DeviceIndex d) {
  check_device(d);
  static std::once_flag once;
  static std::deque<at::Generator> gens;
  std::call_once(once, [] {
    for (int i = 0; i < device_count(); ++i)
      gens.push_back(at::make_generator<MusaGeneratorImpl>(
          static_cast<c10::DeviceIndex>(i),
          driver().default_kernel_generator(static_cast<c10::DeviceIndex>(i))));
  });
  return gens[d];
}

at::Generator new_generator(c10::DeviceIndex d) {
  check_device(d);
  return make(d, c10::default_rng_seed_val);
}

at::Generator kernel_generator_of(const at::Generator& g) {
  return static_cast<MusaGeneratorImpl*>(g.unsafeGetGeneratorImpl())->host();
}

}  // namespace torch_musa
