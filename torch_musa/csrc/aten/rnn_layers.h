// The recurrent layers of the host driver (rnn_layers.cpp).
#pragma once

namespace torch_musa {

// Whether nn.LSTM/GRU on the host driver may take the CPU device's whole-layer kernels
// where the CPU device does (inference; oneDNN's layer for float32 LSTM training) instead
// of the step-wise fused cells. On by default: same bits as the CPU device, and faster.
// musa-doctor turns it off to record the ops a MUSA card runs (its torch_musa steps
// the fused cells). Returns the previous setting.
bool set_rnn_cpu_layers(bool on);

}  // namespace torch_musa
