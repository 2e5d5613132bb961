// AOTInductor's model runner for musa: the runner that aoti_load_package (Python)
// and torch::inductor::AOTIModelPackageLoader (C++) create for a package whose
// AOTI_DEVICE_KEY is "musa".
//
// A musa package holds a model compiled for the kernel device (the CPU's code
// under the host driver, CUDA's under the cuda driver; torch_musa/_inductor/aoti.py
// says why). This runner loads it as that device's runner does, and runs it as
// one op of the op path
// (kernel_call.h): the musa inputs become zero-copy kernel-device aliases, the
// model's allocations come from the musa pool (KernelAllocationScope), and its
// results come back as musa tensors over that memory, or over the inputs' when
// it returns (views of) them. Linking libtorch_musa registers it, so a C++
// program needs no Python.
#include "aten/kernel_call.h"

#include <torch/csrc/inductor/aoti_runner/model_container_runner_cpu.h>
#ifdef TORCH_MUSA_WITH_CUDA
#include <torch/csrc/inductor/aoti_runner/model_container_runner_cuda.h>
#endif
#include <torch/csrc/inductor/aoti_torch/utils.h>

#include <fstream>
#include <iterator>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

namespace torch_musa {
namespace {

// What the compile side (torch_musa/_inductor/aoti.py) writes into the package's
// metadata: the kernel device the model was compiled for.
constexpr const char* kKernelDeviceKey = "\"AOTI_MUSA_KERNEL_DEVICE\": \"";

std::string kernel_device_of(const std::string& so_path) {
  const std::string json = so_path.substr(0, so_path.find_last_of('.')) + "_metadata.json";
  std::ifstream f(json);
  if (!f) return "";
  const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const size_t at = text.find(kKernelDeviceKey);
  if (at == std::string::npos) return "";
  const size_t from = at + std::char_traits<char>::length(kKernelDeviceKey);
  return text.substr(from, text.find('"', from) - from);
}

c10::DeviceIndex index_of(const std::string& device_str) {
  const c10::Device d(device_str);
  TORCH_CHECK(d.is_privateuseone(), "the musa AOTInductor runner was asked for device '",
              device_str, "'; it runs packages on musa devices only");
  return d.has_index() ? d.index() : -1;
}

// `KernelRunner`: the kernel device's own runner (CPU's, or CUDA's under the cuda
// driver, which runs on the current CUDA stream: the current musa stream there).
template <class KernelRunner>
class MusaModelRunner : public KernelRunner {
 public:
  template <class... Args>
  explicit MusaModelRunner(c10::DeviceIndex device, Args&&... args)
      : KernelRunner(std::forward<Args>(args)...), device_(device) {}

 protected:
  std::vector<at::Tensor> run_impl(std::vector<AtenTensorHandle>& inputs,
                                   void* stream_handle) override {
    KernelCall call("aoti::run");
    std::vector<at::Tensor*> args;
    args.reserve(inputs.size());
    for (AtenTensorHandle h : inputs) {
      args.push_back(torch::aot_inductor::tensor_handle_to_tensor_pointer(h));
      const at::Tensor& t = *args.back();
      // A 0-dim CPU tensor may come along as a scalar, as for an op.
      TORCH_CHECK(!t.defined() || t.is_privateuseone() || t.dim() == 0,
                  "a musa AOTInductor model takes musa tensors; input ", args.size() - 1,
                  " is on ", t.device(), " (move it with .to('musa'))");
      // written: a model may mutate its inputs.
      call.see(t, "input", false, /*written=*/t.defined() && t.is_privateuseone());
    }
    const c10::DeviceIndex device = call.device();
    TORCH_CHECK(device_ < 0 || device == device_, "this musa AOTInductor model was loaded for musa:",
                int(device_), " but its inputs are on musa:", int(device));
    DeviceSwitch on(device);
    for (at::Tensor* t : args) *t = call.to_kernel(*t, /*written=*/true);
    std::vector<at::Tensor> outs;
    {
      KernelAllocationScope scope(device);
      // The model .so takes the handles (and the kernel aliases in them) over.
      outs = KernelRunner::run_impl(inputs, stream_handle);
    }
    call.sync_written();
    ResultStorages refs;
    for (const at::Tensor& o : outs) refs.count(o);
    for (at::Tensor& o : outs) o = call.to_musa(o, refs.refs_of(o));
    return outs;
  }

 private:
  c10::DeviceIndex device_;
};

std::unique_ptr<torch::inductor::AOTIModelContainerRunner> create_runner(
    const std::string& so_path, size_t num_models, const std::string& device_str,
    const std::string& bin_dir, const bool run_single_threaded) {
  const c10::DeviceIndex device = index_of(device_str);
  if (device >= 0) check_device(device);
  const std::string compiled_for = kernel_device_of(so_path);
  const std::string runs_on = c10::DeviceTypeName(config().kernel_type, /*lower_case=*/true);
  TORCH_CHECK(compiled_for == "cpu" || compiled_for == "cuda",
              "this musa AOTInductor package was compiled for ",
              compiled_for.empty() ? std::string("an unknown kernel device") : compiled_for,
              " kernels; the musa runner runs packages of cpu kernels (compiled under the "
              "host driver) or cuda kernels (the cuda driver). Compile it again with "
              "aoti_compile_and_package under the driver that will run it.");
  const char* compiled_by = compiled_for == "cpu" ? "host" : "cuda";  // the driver
  TORCH_CHECK(runs_on == compiled_for,
              "this musa AOTInductor package holds ", compiled_for, " kernels, but the ",
              driver().name(), " driver runs ", runs_on, " kernels: load it under the ",
              compiled_by, " driver (TORCH_MUSA_DRIVER=", compiled_by, ")");
#ifdef TORCH_MUSA_WITH_CUDA
  if (compiled_for == "cuda") {
    // musa:N is cuda:N under the cuda driver.
    const std::string cuda_device = device >= 0 ? "cuda:" + std::to_string(device) : "cuda";
    return std::make_unique<MusaModelRunner<torch::inductor::AOTIModelContainerRunnerCuda>>(
        device, so_path, num_models, cuda_device, bin_dir, run_single_threaded);
  }
#endif
  return std::make_unique<MusaModelRunner<torch::inductor::AOTIModelContainerRunnerCpu>>(
      device, so_path, num_models, run_single_threaded);
}

const torch::inductor::RegisterAOTIModelRunner register_musa_runner("musa", &create_runner);

}  // namespace
}  // namespace torch_musa
