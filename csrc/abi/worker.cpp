// The inference threads: workers that run forwards handed over from other threads (ts_worker),
// the spin of a hand-off, and the measurement of the gaps the machine takes from a running thread
// (ts_measure_gaps).
#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>

#include <time.h>

#include "internal.h"
#include "spin.h"

// ---- workers ----
// A forward handed to a worker: it lives on the caller's stack for the length of
// ts_worker_forward; the serving thread fills st/out, reads waiting and then sets done (under the
// worker's mutex), and touches it no more: a spinning caller may return the moment done is set.
struct ts_worker_job {
  const ts_module* m = nullptr;
  ts_tensor* const* inputs = nullptr;
  size_t n = 0;
  ts_outputs* out = nullptr;
  ts_status* st = nullptr;
  std::atomic<bool> done{false};  // release-stored by the serving thread, after out and st
  bool waiting = false;           // under the mutex: the caller sleeps on ts_worker::done
};

// Both sides of a hand-off spin briefly before they sleep. Waking a sleeping thread costs a futex
// call on one side and a scheduler wake-up on the other; on a VM the wake-up of an idle vCPU
// is an interrupt through the hypervisor, measured at 20-90 us per call (2 vCPUs, Zen 5) on
// models that run in 50-300 us. The serving thread spins for the next job after each short one (a
// closed loop of calls, or a server under load, posts it within microseconds); a caller spins
// for its result only when the serving thread's last forward was shorter than its bound and its
// OpenMP team is smaller than the CPUs the process may use, so that it never takes a CPU from
// the forward's team. Process-wide, set by ts_set_handoff_spin.
namespace {
std::atomic<int64_t> g_serve_spin_ns{100000};
std::atomic<int64_t> g_wait_spin_ns{500000};
}  // namespace

// Notifications go out after the mutex is released, so that the woken thread does not wake
// only to wait for the mutex (a second context switch on every call), and only to a thread
// that sleeps: a spinning one sees the change by itself.
struct ts_worker {
  std::mutex mu;
  std::condition_variable work;  // the serving thread waits here for a job, a kick or close
  std::condition_variable done;  // callers wait here for their job
  std::deque<ts_worker_job*> jobs;
  bool kicked = false;
  bool closed = false;
  bool asleep = false;                  // under mu: the serving thread waits on work
  std::atomic<uint64_t> posted{0};      // bumped under mu by each job, kick and close: the serving thread's spin watches it
  std::atomic<int64_t> last_ns{-1};     // the serving thread's last forward; -1 before the first
  std::atomic<int32_t> spinners{0};     // callers spinning for their result
  std::atomic<int32_t> team{0};         // the serving thread's OpenMP team size, read as it starts serving
  tsimpl::Backoff serve_backoff;                // the serving thread's spins for a next job
  tsimpl::Backoff wait_backoff;                 // callers' spins for a result
};

// post runs f (which changes what the serving thread waits for) under the mutex, then wakes the
// serving thread if it sleeps.
namespace {
template <class F>
void post(ts_worker* w, F f) {
  bool wake;
  {
    std::lock_guard<std::mutex> lk(w->mu);
    f();
    w->posted.fetch_add(1, std::memory_order_relaxed);
    wake = w->asleep;
  }
  if (wake) w->work.notify_one();
}
}  // namespace

extern "C" {

ts_status* ts_worker_new(ts_worker** out) noexcept {
  TS_API_BEGIN
  TS_CHECK_NOT_NULL(out, "worker_new");
  *out = std::make_unique<ts_worker>().release();
  TS_API_END("worker_new")
}

void ts_worker_free(ts_worker* w) noexcept { delete w; }

ts_status* ts_set_handoff_spin(int64_t serve_ns, int64_t wait_ns) noexcept {
  TS_API_BEGIN
  TS_CHECK_ARG(serve_ns >= 0 && wait_ns >= 0, "set_handoff_spin",
               "spin times must be >= 0 ns, got " + std::to_string(serve_ns) + " and " + std::to_string(wait_ns));
  g_serve_spin_ns.store(serve_ns, std::memory_order_relaxed);
  g_wait_spin_ns.store(wait_ns, std::memory_order_relaxed);
  TS_API_END("set_handoff_spin")
}

void ts_get_handoff_spin(int64_t* serve_ns, int64_t* wait_ns) noexcept {
  if (serve_ns != nullptr) *serve_ns = g_serve_spin_ns.load(std::memory_order_relaxed);
  if (wait_ns != nullptr) *wait_ns = g_wait_spin_ns.load(std::memory_order_relaxed);
}

// The loop reads the monotonic clock back to back; a read that comes more than threshold_ns
// after the previous one means the thread did not run in between. Nothing else happens in the
// loop (no allocation, no system call besides the clock's, which is the vDSO's on Linux), so
// what it records is what the machine takes from any thread on that CPU.
ts_status* ts_measure_gaps(int64_t duration_ns, int64_t threshold_ns, int64_t* at_ns, int64_t* len_ns, size_t cap,
                           ts_gap_totals* totals) noexcept {
  TS_API_BEGIN
  TS_CHECK_ARG(duration_ns > 0 && duration_ns <= 60000000000LL, "measure_gaps",
               "duration must be in (0, 60 s], got " + std::to_string(duration_ns) + " ns");
  TS_CHECK_ARG(threshold_ns > 0, "measure_gaps", "threshold must be > 0 ns, got " + std::to_string(threshold_ns));
  TS_CHECK_ARG(cap == 0 || (at_ns != nullptr && len_ns != nullptr), "measure_gaps",
               "at_ns and len_ns must hold cap entries");
  TS_CHECK_NOT_NULL(totals, "measure_gaps");
  auto now = [] {
    timespec t{};
    clock_gettime(CLOCK_MONOTONIC, &t);
    return static_cast<int64_t>(t.tv_sec) * 1000000000LL + t.tv_nsec;
  };
  const int64_t start = now();
  const int64_t end = start + duration_ns;
  int64_t prev = start, reads = 0, count = 0, lost = 0, longest = 0;
  size_t kept = 0;
  for (;;) {
    const int64_t t = now();
    ++reads;
    const int64_t gap = t - prev;
    if (gap > threshold_ns) {
      ++count;
      lost += gap;
      longest = std::max(longest, gap);
      if (kept < cap) {
        at_ns[kept] = prev - start;
        len_ns[kept] = gap;
        ++kept;
      }
    }
    prev = t;
    if (t >= end) break;
  }
  totals->elapsed_ns = prev - start;
  totals->reads = reads;
  totals->count = count;
  totals->kept = static_cast<int64_t>(kept);
  totals->lost_ns = lost;
  totals->longest_ns = longest;
  TS_API_END("measure_gaps")
}

int32_t ts_worker_serve(ts_worker* w) noexcept {
  if (w == nullptr) return 0;
  tsimpl::tl_inference_thread = true;
  // Set between calls (ts_worker_kick hands the thread back to its owner, who may set it).
  w->team.store(static_cast<int32_t>(at::get_num_threads()), std::memory_order_relaxed);
  std::unique_lock<std::mutex> lk(w->mu);
  auto ready = [w] { return !w->jobs.empty() || w->kicked || w->closed; };
  for (;;) {
    if (!ready()) {
      // Not after a forward that took ten times the spin or more: a wake-up saves a few percent
      // of it at best, and the spin holds a CPU the caller's next call may need (measured, INT8
      // resnet18 at 2 threads on 2 vCPUs, load 6: 1.19x slower with it, interval 1.03-1.40).
      const int64_t spin = g_serve_spin_ns.load(std::memory_order_relaxed);
      const int64_t last = w->last_ns.load(std::memory_order_relaxed);
      if (spin > 0 && last < 10 * spin && w->serve_backoff.allow()) {
        const uint64_t seen = w->posted.load(std::memory_order_relaxed);
        lk.unlock();
        w->serve_backoff.record(
            tsimpl::spin_until([w, seen] { return w->posted.load(std::memory_order_relaxed) != seen; }, spin));
        lk.lock();
      }
      // Set and cleared under mu around the wait: a poster reads it under mu, so it either sees
      // it set (and notifies) or posts before the predicate below is checked.
      w->asleep = true;
      w->work.wait(lk, ready);
      w->asleep = false;
    }
    if (w->jobs.empty()) {
      if (!w->kicked) return 0;  // closed, every job posted before it served
      w->kicked = false;
      return 1;
    }
    ts_worker_job* j = w->jobs.front();
    w->jobs.pop_front();
    lk.unlock();
    ts_outputs* out = nullptr;
    const int64_t t0 = tsimpl::now_ns();
    ts_status* st = ts_module_forward(j->m, j->inputs, j->n, &out);
    w->last_ns.store(tsimpl::now_ns() - t0, std::memory_order_relaxed);
    lk.lock();
    const bool notify = j->waiting;
    j->out = out;
    j->st = st;
    j->done.store(true, std::memory_order_release);  // from here on the caller may return: j is not touched again
    if (notify) {
      lk.unlock();
      w->done.notify_all();
      lk.lock();
    }
  }
}

void ts_worker_kick(ts_worker* w) noexcept {
  if (w == nullptr) return;
  post(w, [w] { w->kicked = true; });
}

void ts_worker_close(ts_worker* w) noexcept {
  if (w == nullptr) return;
  post(w, [w] { w->closed = true; });
}

ts_status* ts_worker_forward(ts_worker* w, const ts_module* m, ts_tensor* const* inputs, size_t n,
                             ts_outputs** out) noexcept {
  TS_API_BEGIN
  TS_CHECK_NOT_NULL(w, "worker_forward");
  TS_CHECK_NOT_NULL(m, "worker_forward");
  TS_CHECK_NOT_NULL(out, "worker_forward");
  ts_worker_job j;
  j.m = m;
  j.inputs = inputs;
  j.n = n;
  bool wake;
  {
    std::lock_guard<std::mutex> lk(w->mu);
    if (w->closed) return tsimpl::make_status(TS_CODE_INVALID_ARGUMENT, "worker_forward", "the worker is closed");
    w->jobs.push_back(&j);
    w->posted.fetch_add(1, std::memory_order_relaxed);
    wake = w->asleep;
  }
  if (wake) w->work.notify_one();
  const int64_t spin = g_wait_spin_ns.load(std::memory_order_relaxed);
  const int64_t last = w->last_ns.load(std::memory_order_relaxed);
  // A caller spins only while the forward's OpenMP team leaves it a CPU, for about as long as
  // the last forward took plus a margin, and at most one caller per worker: callers queued
  // behind it would wait longer than the bound anyway.
  if (spin > 0 && last >= 0 && last < spin && w->team.load(std::memory_order_relaxed) < tsimpl::affinity_cpus()) {
    if (w->spinners.fetch_add(1, std::memory_order_relaxed) == 0 && w->wait_backoff.allow()) {
      const int64_t budget = std::min(spin, last + last / 2 + 20000);
      w->wait_backoff.record(tsimpl::spin_until([&j] { return j.done.load(std::memory_order_acquire); }, budget));
    }
    w->spinners.fetch_sub(1, std::memory_order_relaxed);
  }
  if (!j.done.load(std::memory_order_acquire)) {
    std::unique_lock<std::mutex> lk(w->mu);
    j.waiting = true;
    w->done.wait(lk, [&j] { return j.done.load(std::memory_order_relaxed); });
  }
  if (j.st != nullptr) return j.st;
  *out = j.out;
  TS_API_END("worker_forward")
}

}  // extern "C"
