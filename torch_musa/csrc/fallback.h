#pragma once

#include <string>
#include <vector>

namespace torch_musa {

// Ops that may touch dtypes the hardware profile lacks (data movement).
void set_dtype_exempt_ops(const std::vector<std::string>& names);
// Route these ops (by "name.overload") straight to the fallback, skipping
// PyTorch's generic structured wrappers that would otherwise run first.
void register_fallback_for(const std::vector<std::string>& ops);

}  // namespace torch_musa
