// Sharing musa storages between processes (torch.multiprocessing), as CUDA IPC
// does. The host driver's device memory is host RAM, so a shared storage moves
// into a memfd mapping: its file descriptor travels to the receiving process
// (core/ipc.py pickles it with multiprocessing's DupFd), which maps the same
// pages, so writes are seen both ways. Each mapping keeps the pages alive, so
// the sender's memory outlives its use in the receiver and the other way round.
//
// Accounting: the sender's storage keeps its original pool block until it dies,
// so torch.musa.memory_allocated() does not change when a tensor is shared; the
// receiver's mapping is not pool memory and is not counted there (as memory a
// CUDA process opens by IPC handle is not).
#include "core/Device.h"
#include "core/MUSACachingAllocator.h"

#include <ATen/Tensor.h>
#include <c10/core/StorageImpl.h>
#include <c10/core/TensorImpl.h>
#include <torch/library.h>

#include <cerrno>
#include <cstring>
#include <sys/mman.h>
#include <unistd.h>

namespace torch_musa {

namespace {

struct SharedBlock {
  int fd;
  void* ptr;
  size_t nbytes;
  c10::DataPtr pool_block;  // the sender's original memory (accounting), or empty
};

void release_shared(void* ctx) {
  auto* b = static_cast<SharedBlock*>(ctx);
  munmap(b->ptr, b->nbytes);
  close(b->fd);
  delete b;
}

void check_host_driver(const char* what) {
  TORCH_CHECK(config().kernel_type == c10::DeviceType::CPU, what,
              ": sharing musa tensors between processes needs the host driver "
              "(TORCH_MUSA_DRIVER=host), where device memory is host RAM.");
}

void* map_fd(int fd, size_t nbytes) {
  void* p = mmap(nullptr, nbytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  TORCH_CHECK(p != MAP_FAILED, "mapping musa shared memory of ", nbytes,
              " bytes failed: ", std::strerror(errno));
  return p;
}

// (fd, nbytes) of `t`'s storage, moved into shared memory first if need be.
// The fd stays owned by the storage: the caller duplicates it to send it.
std::vector<int64_t> share_fd(const at::Tensor& t) {
  check_host_driver("share_fd");
  TORCH_CHECK(t.is_privateuseone(), "share_fd expects a musa tensor, got ", t.device());
  c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
  const size_t nbytes = s->nbytes();
  TORCH_CHECK(nbytes > 0, "share_fd: an empty storage has no memory to share");
  if (s->data_ptr().get_deleter() == &release_shared) {
    auto* b = static_cast<SharedBlock*>(s->data_ptr().get_context());
    return {b->fd, int64_t(b->nbytes)};
  }
  const int fd = memfd_create("torch_musa_ipc", MFD_CLOEXEC);
  TORCH_CHECK(fd >= 0, "memfd_create failed: ", std::strerror(errno));
  if (ftruncate(fd, off_t(nbytes)) != 0) {
    const int err = errno;
    close(fd);
    TORCH_CHECK(false, "sizing musa shared memory to ", nbytes, " bytes failed: ",
                std::strerror(err));
  }
  void* p = nullptr;
  try {
    p = map_fd(fd, nbytes);
  } catch (...) {
    close(fd);
    throw;
  }
  std::memcpy(p, s->data(), nbytes);
  auto* b = new SharedBlock{fd, p, nbytes, c10::DataPtr()};
  b->pool_block = s->set_data_ptr(c10::DataPtr(p, b, &release_shared, t.device()));
  return {fd, int64_t(nbytes)};
}

// A 1-D uint8 musa tensor over the shared memory behind `fd` (taken over:
// closed with the storage).
at::Tensor from_fd(int64_t fd, int64_t nbytes, int64_t device) {
  check_host_driver("from_fd");
  TORCH_CHECK(nbytes > 0, "from_fd: nbytes must be positive, got ", nbytes);
  check_device(c10::DeviceIndex(device));
  void* p = nullptr;
  try {
    p = map_fd(int(fd), size_t(nbytes));
  } catch (...) {
    close(int(fd));
    throw;
  }
  const c10::Device dev(c10::DeviceType::PrivateUse1, c10::DeviceIndex(device));
  auto* b = new SharedBlock{int(fd), p, size_t(nbytes), c10::DataPtr()};
  c10::Storage storage(c10::make_intrusive<c10::StorageImpl>(
      c10::StorageImpl::use_byte_size_t(), size_t(nbytes),
      c10::DataPtr(p, b, &release_shared, dev), &device_allocator(),
      /*resizable=*/false));
  auto impl = c10::make_intrusive<c10::TensorImpl>(
      std::move(storage), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
      caffe2::TypeMeta::Make<uint8_t>());
  impl->set_sizes_contiguous({nbytes});
  return at::Tensor(std::move(impl));
}

bool is_shared(const at::Tensor& t) {
  return t.has_storage() &&
         t.storage().unsafeGetStorageImpl()->data_ptr().get_deleter() == &release_shared;
}

}  // namespace

}  // namespace torch_musa

TORCH_LIBRARY(musa_ipc, m) {
  m.def("share_fd(Tensor self) -> int[]", &torch_musa::share_fd);
  m.def("from_fd(int fd, int nbytes, int device) -> Tensor", &torch_musa::from_fd);
  m.def("is_shared(Tensor self) -> bool", &torch_musa::is_shared);
}
