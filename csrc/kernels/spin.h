// Bounded spinning for the worker hand-off (runtime.cpp): a pause loop that yields and notices
// when its thread was switched out, and the back-off that stops spins that do not pay. No torch
// headers.
#pragma once

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>

namespace tsimpl {

// CPUs this process may run on, read once.
inline int affinity_cpus() {
  static const int n = [] {
    cpu_set_t set;
    CPU_ZERO(&set);
    return sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;
  }();
  return n;
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

inline int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Spins until ready() or budget_ns have passed; reads the clock every 64 pauses, and yields the
// CPU there: on an idle CPU sched_yield returns at once, on a busy one it lets the thread that
// would finish the wait run. A gap of more than 20 us between two clock reads (a few us apart
// when the spinner has its CPU) means the spinner was switched out: the CPUs are oversubscribed
// and spinning takes time from the threads it waits for, so it stops there. Measured, load 8-11
// on 2 vCPUs: a caller spinning on pauses alone ran digits in 680 us per call instead of 148.
enum class Spin { ready, timeout, preempted };

template <class Ready>
inline Spin spin_until(Ready ready, int64_t budget_ns) {
  if (budget_ns <= 0) return ready() ? Spin::ready : Spin::timeout;
  int64_t prev = now_ns();
  const int64_t deadline = prev + budget_ns;
  for (;;) {
    for (int i = 0; i < 64; i++) {
      if (ready()) return Spin::ready;
      cpu_relax();
    }
    const int64_t t = now_ns();
    if (ready()) return Spin::ready;
    if (t - prev > 20000) return Spin::preempted;
    if (t >= deadline) return Spin::timeout;
    sched_yield();
    prev = t;
  }
}

// A spin that ran out (the job or the result did not come within it) held a CPU for nothing, and
// one that was switched out took a CPU from another thread: after one, the next spin is skipped,
// after two in a row the next two, then four, up to 256; a spin that pays resets it. On a CPU-starved host spins run out and mostly stop; while calls
// come back to back they keep paying. Relaxed atomics: a lost update only shifts when the next
// spin comes.
struct Backoff {
  std::atomic<int32_t> skip{0};   // spins still to skip
  std::atomic<int32_t> level{0};  // spins to skip after the next miss
  bool allow() {
    int32_t s = skip.load(std::memory_order_relaxed);
    if (s <= 0) return true;
    skip.store(s - 1, std::memory_order_relaxed);
    return false;
  }
  void record(Spin r) {
    if (r == Spin::ready) {
      level.store(0, std::memory_order_relaxed);
      return;
    }
    int32_t l = level.load(std::memory_order_relaxed);
    l = l == 0 ? 1 : std::min<int32_t>(2 * l, 256);
    level.store(l, std::memory_order_relaxed);
    skip.store(l, std::memory_order_relaxed);
  }
};

}  // namespace tsimpl
