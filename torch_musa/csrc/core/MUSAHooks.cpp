// The device as PyTorch sees it: the PrivateUse1 hooks (device count,
// generators, pinned memory, storage resize), and the registration of the
// guard (MUSAGuard.h), the hooks and the allocator.
#include "core/MUSACachingAllocator.h"
#include "core/MUSAGenerator.h"
#include "core/Device.h"
#include "core/MUSAStream.h"
#include "core/MUSAGuard.h"

#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <optional>
#include <type_traits>

// The public guards must stay usable (nothing in the runtime instantiates them).
static_assert(std::is_constructible_v<c10::musa::MUSAGuard, c10::DeviceIndex>);
static_assert(std::is_constructible_v<c10::musa::OptionalMUSAGuard, std::optional<c10::Device>>);
static_assert(std::is_constructible_v<c10::musa::MUSAStreamGuard, c10::Stream>);

namespace torch_musa {

namespace {

using c10::Device;
using c10::DeviceIndex;
using c10::Stream;

Device musa(DeviceIndex i) { return Device(c10::DeviceType::PrivateUse1, i); }

struct Hooks final : at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return device_count() > 0; }
  bool hasPrimaryContext(DeviceIndex d) const override {
    check_device(d);
    return is_initialized();
  }
  void init() const override { mark_initialized(); }
  DeviceIndex deviceCount() const override { return device_count(); }
  void setCurrentDevice(DeviceIndex d) const override { set_current_device(d); }
  DeviceIndex getCurrentDevice() const override { return current_device(); }
  DeviceIndex exchangeDevice(DeviceIndex d) const override {
    const DeviceIndex old = current_device();
    set_current_device(d);
    return old;
  }
  DeviceIndex maybeExchangeDevice(DeviceIndex d) const override {
    return exchangeDevice(d);
  }
  bool isPinnedPtr(const void* p) const override { return is_pinned(p); }
  c10::Allocator* getPinnedMemoryAllocator() const override {
    return &pinned_allocator();
  }
  Device getDeviceFromPtr(void* p) const override {
    const int d = device_allocator().device_of(p);
    TORCH_CHECK(d >= 0, "pointer ", p, " is not musa device memory");
    return musa(static_cast<DeviceIndex>(d));
  }
  const at::Generator& getDefaultGenerator(DeviceIndex d) const override {
    return default_generator(d < 0 ? current_device() : d);
  }
  at::Generator getNewGenerator(DeviceIndex d) const override {
    return new_generator(d < 0 ? current_device() : d);
  }
  void resizePrivateUse1Bytes(const c10::Storage& storage,
                              size_t newsize) const override {
    resize_storage_bytes(storage.unsafeGetStorageImpl(), newsize);
  }
};

}  // namespace

void register_device() {
  static MUSAGuardImpl guard;
  static Hooks hooks;
  static bool done = false;
  if (done) return;
  done = true;
  static c10::impl::DeviceGuardImplRegistrar reg(c10::DeviceType::PrivateUse1, &guard);
  at::RegisterPrivateUse1HooksInterface(&hooks);
  c10::SetAllocator(c10::DeviceType::PrivateUse1, &device_allocator());
  install_kernel_allocation_redirect();
}

}  // namespace torch_musa
