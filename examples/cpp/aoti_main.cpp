// Runs an AOTInductor package compiled on musa (aoti_package_model.py) on musa:0
// from C++, with no Python: linking the torch_musa target registers the device and
// the runner PyTorch's package loader picks for a musa package.
//
//   ./musa_aoti model.pt2
//
// Prints the output, one value a line, as aoti_package_model.py does.
#include <ATen/ATen.h>
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>
#include <torch_musa/csrc/core/Device.h>
#include <torch_musa/csrc/core/MUSAGuard.h>

#include <cstdio>
#include <iostream>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: " << argv[0] << " model.pt2\n";
    return 2;
  }
  if (c10::musa::device_count() < 1) {
    std::cerr << "no musa device\n";
    return 1;
  }
  const c10::Device musa("musa:0");
  c10::musa::MUSAGuard guard(musa.index());
  torch::inductor::AOTIModelPackageLoader loader(argv[1]);
  std::cerr << "package device: " << loader.get_metadata()["AOTI_DEVICE_KEY"] << "\n";

  // The input aoti_package_model.py used: linspace(-1, 1, 48) as a (2, 1, 4, 6) batch.
  at::Tensor x = at::linspace(-1, 1, 48).reshape({2, 1, 4, 6}).to(musa);
  std::vector<at::Tensor> outs = loader.run({x});
  if (outs.size() != 1 || outs[0].device() != musa) {
    std::cerr << "expected one output on musa:0\n";
    return 1;
  }
  std::cerr << "ran on " << outs[0].device() << " of " << int(c10::musa::device_count())
            << " musa device(s)\n";
  at::Tensor host = outs[0].cpu().contiguous().to(at::kDouble).flatten();
  for (int64_t i = 0; i < host.numel(); ++i) std::printf("%.9g\n", host[i].item<double>());
  return 0;
}
