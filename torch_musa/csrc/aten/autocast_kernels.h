#pragma once

#include <string>
#include <utility>
#include <vector>

namespace torch_musa {

// Registers CUDA's autocast policy (ATen's per-policy op lists, the CUDA ones) on
// AutocastPrivateUse1, once; returns ("op.overload", policy) for every op it
// registered. Called by torch_musa.amp when it installs autocast.
std::vector<std::pair<std::string, std::string>> register_autocast_kernels();

}  // namespace torch_musa
