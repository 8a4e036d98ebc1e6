// OpenMP threads bound one per CPU, as vLLM's CPU backend binds them.
//
// Unbound, the scheduler moves GEMM threads between cores, and their caches go cold; bound, each keeps its core.
// Affinity can only be set by a thread on itself, so each thread of the team sets its own inside one parallel
// region. OpenMP keeps one team per calling thread: this binds the team of the thread that calls it, which must be
// the thread that runs the model.
#include "cpu_kernels.h"

#include <omp.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

std::vector<int64_t> bind_omp_threads(const std::vector<int64_t>& cpus) {
  const int count = static_cast<int>(cpus.size());
  std::vector<int64_t> tids(count, -1);
#pragma omp parallel num_threads(count)
  {
    const int i = omp_get_thread_num();
    cpu_set_t mask;
    CPU_ZERO(&mask);
    CPU_SET(static_cast<int>(cpus[i]), &mask);
    if (sched_setaffinity(0, sizeof(mask), &mask) == 0) tids[i] = static_cast<int64_t>(syscall(SYS_gettid));
  }
  return tids;
}
