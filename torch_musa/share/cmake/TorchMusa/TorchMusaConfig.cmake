# find_package(TorchMusa): the musa device for C++ programs and extensions.
#
# Defines the imported target `torch_musa` (the runtime library
# torch_musa/lib/libtorch_musa.so, the public headers under torch_musa/csrc, and
# Torch as a dependency) and the variables TORCH_MUSA_FOUND,
# TORCH_MUSA_INCLUDE_DIRS and TORCH_MUSA_LIBRARIES. Linking the target registers
# the device when the program starts: "musa:0" parses, tensors and TorchScript
# models move to musa and run there.
#
# Point CMAKE_PREFIX_PATH here with torch_musa.core.cmake_prefix_path (the same
# as torch.musa.cmake_prefix_path), next to torch.utils.cmake_prefix_path:
#   cmake -DCMAKE_PREFIX_PATH="$(python -c 'import torch, torch_musa; \
#     print(torch.utils.cmake_prefix_path + ";" + torch.musa.cmake_prefix_path)')" ..
# Torch is also looked for next to this package (site-packages/torch).

get_filename_component(_TORCH_MUSA_PACKAGE "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)
get_filename_component(_TORCH_MUSA_ROOT "${_TORCH_MUSA_PACKAGE}/.." ABSOLUTE)

if(NOT TARGET torch)
  find_package(Torch REQUIRED HINTS "${_TORCH_MUSA_ROOT}/torch/share/cmake/Torch")
endif()

set(_TORCH_MUSA_LIBRARY "${_TORCH_MUSA_PACKAGE}/lib/libtorch_musa.so")
if(NOT EXISTS "${_TORCH_MUSA_LIBRARY}")
  set(TorchMusa_FOUND FALSE)
  set(TorchMusa_NOT_FOUND_MESSAGE
      "${_TORCH_MUSA_LIBRARY} is missing: build torch_musa first (pip install ., or "
      "python setup.py build_ext --inplace in a checkout)")
  return()
endif()

# <torch_musa/csrc/core/Device.h> from the package's parent; the headers'
# own includes ("core/Device.h", "driver/Driver.h") from csrc.
set(TORCH_MUSA_INCLUDE_DIRS "${_TORCH_MUSA_ROOT}" "${_TORCH_MUSA_PACKAGE}/csrc")
set(TORCH_MUSA_LIBRARIES torch_musa)

if(NOT TARGET torch_musa)
  add_library(torch_musa SHARED IMPORTED)
  set_target_properties(torch_musa PROPERTIES
    IMPORTED_LOCATION "${_TORCH_MUSA_LIBRARY}"
    IMPORTED_SONAME "libtorch_musa.so"
    INTERFACE_INCLUDE_DIRECTORIES "${TORCH_MUSA_INCLUDE_DIRS}"
    INTERFACE_LINK_LIBRARIES "${TORCH_LIBRARIES}"
    # The library registers the device when loaded: keep it linked even where the
    # program calls none of its functions (linkers that default to --as-needed).
    INTERFACE_LINK_OPTIONS "LINKER:--no-as-needed")
  # The C++ standard torch was built with (its target's CXX_STANDARD does not
  # propagate): another one mismatches c10's inline code.
  get_target_property(_TORCH_MUSA_CXX_STANDARD torch CXX_STANDARD)
  if(_TORCH_MUSA_CXX_STANDARD)
    set_property(TARGET torch_musa PROPERTY
                 INTERFACE_COMPILE_FEATURES "cxx_std_${_TORCH_MUSA_CXX_STANDARD}")
  endif()
endif()

set(TORCH_MUSA_FOUND TRUE)
set(TorchMusa_FOUND TRUE)
