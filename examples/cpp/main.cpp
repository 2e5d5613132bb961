// Runs a TorchScript model traced on musa (trace_model.py) on musa:0 from C++,
// with no Python: linking the torch_musa target registers the device.
//
//   ./musa_deploy model.pt
//
// Prints the output, one value a line, as trace_model.py does.
#include <torch/script.h>
#include <torch_musa/csrc/core/Device.h>
#include <torch_musa/csrc/core/MUSAGuard.h>

#include <cstdio>
#include <iostream>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: " << argv[0] << " model.pt\n";
    return 2;
  }
  if (c10::musa::device_count() < 1) {
    std::cerr << "no musa device\n";
    return 1;
  }
  const torch::Device musa("musa:0");
  c10::musa::MUSAGuard guard(musa.index());
  torch::jit::script::Module model = torch::jit::load(argv[1], musa);
  model.eval();
  torch::NoGradGuard no_grad;

  // The input trace_model.py used: linspace(-1, 1, 48) as a (2, 1, 4, 6) batch.
  torch::Tensor x = torch::linspace(-1, 1, 48).reshape({2, 1, 4, 6}).to(musa);
  torch::Tensor out = model.forward({x}).toTensor();
  if (out.device() != musa) {
    std::cerr << "the output is on " << out.device() << ", not musa:0\n";
    return 1;
  }
  std::cerr << "ran on " << out.device() << " of " << int(c10::musa::device_count())
            << " musa device(s)\n";
  torch::Tensor host = out.cpu().contiguous().to(torch::kDouble).flatten();
  for (int64_t i = 0; i < host.numel(); ++i) std::printf("%.9g\n", host[i].item<double>());
  return 0;
}
