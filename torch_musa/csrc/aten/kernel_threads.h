// The intra-op thread count of musa's host kernels (host driver).
//
// A device computes the same whatever host thread launched the work. Host kernels
// run on the calling thread's OpenMP team, and ATen keeps that team's size per
// thread: at::set_num_threads sets the calling thread's count and a process-wide
// count that threads take when they start (at::init_num_threads). Autograd runs
// musa's backward on its own device thread, started at the first backward with
// that process-wide count, while the CPU device's backward runs on the caller's
// thread. A DataLoader(pin_memory=True, num_workers>0) calls
// torch.set_num_threads(1) in its pinning thread: musa's backward then ran
// single-threaded, and its parallel reductions summed in another order than the
// CPU's (makemore parted from the CPU at step 3).
//
// So musa's kernels run with the main thread's count (the thread that loaded the
// library: Python's importing thread). Every kernel launched from the main thread
// records it; a kernel on any other thread runs with it. Autograd's device threads
// keep it, and take it again at each node they evaluate (the engine guards the
// node's stream first), so that the Python code of a backward (custom Functions,
// hooks, Python kernels over host aliases) sees the count the CPU's backward
// would. Other threads take it for the kernel only and get their own back after.
// The cost: a thread-local read and at::get_num_threads() per op. Not under the
// cuda driver, whose kernels do not run on host threads.
#pragma once

namespace torch_musa {

class KernelThreads {
 public:
  KernelThreads();
  ~KernelThreads() {
    if (restore_ > 0) leave();
  }
  KernelThreads(const KernelThreads&) = delete;
  KernelThreads& operator=(const KernelThreads&) = delete;

 private:
  void leave();
  int restore_ = 0;      // the thread's own count, put back after the kernel (0: none)
  int restore_mkl_ = 0;  // its MKL thread-local count (0: MKL's global one)
};

// The musa guard's exchangeStream: autograd's device threads call it before each node.
void kernel_threads_on_stream_guard();

}  // namespace torch_musa
