// floor_worker: the machine's own latency spread, for `make bench-peers`.
//
//   floor_worker TARGET_NS THREADS [REGION_NS [WEIGHT_BYTES]]
//
// A call is fixed work and nothing else: REGIONS OpenMP parallel regions (GNU OpenMP, as
// libtorch uses) in which each of THREADS threads reads its share of a weight buffer once and
// runs the same dependent FMA chain; no allocation. The buffer is what a model's weights are
// to an inference, read once per call: WEIGHT_BYTES (bench-peers passes the size of the model
// file the contender runs), by default TARGET_NS x 4 bytes/ns, between 64 KiB and 1 GiB; when
// reading it alone takes longer than TARGET_NS the calls last as long as that. A floor without it
// missed the stretches in which the host's other tenants evict caches: FMA alone ran at its
// median while the models beside it ran 1.3-1.6x slower for whole blocks. The FMA steps are
// calibrated at start so that the median call lasts TARGET_NS; REGIONS is TARGET_NS /
// REGION_NS (default 100 us, about one convolution of the CNN fixtures), at least 1. Every
// call does the same work, so whatever spread its latencies show (p95/p50) comes from the
// machine: interrupts, the hypervisor taking the vCPU, another tenant's cache and memory
// traffic, one slow CPU holding the team at a barrier. bench-peers times it at a contender's
// p50 in the same rounds as the contenders, as the floor their p95/p50 can be read against.
//
// Protocol of the other workers: "ready {json}", then "run K" -> "ns" and K latencies in
// nanoseconds, "quit" stops it.
#include <errno.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static volatile double sink;

// One thread's share of a region: a dependent multiply-add chain of n steps.
static double chain(int64_t n, double a) {
  for (int64_t i = 0; i < n; i++) a = a * 0.9999999 + 1e-7;
  return a;
}

static int threads = 1;
static int64_t regions = 1;
static int64_t steps = 1000;
static float* weights = NULL;  // read once per call, a slice per region and thread
static int64_t slice = 0;      // floats per region and thread

// One thread's read of its slice in region r: a sum, so the loads cannot be skipped.
static double read_slice(int64_t r, int t) {
  const float* p = weights + (r * threads + t) * slice;
  float acc[16] = {0};
  for (int64_t i = 0; i + 16 <= slice; i += 16)
    for (int k = 0; k < 16; k++) acc[k] += p[i + k];
  double s = 0;
  for (int k = 0; k < 16; k++) s += acc[k];
  return s;
}

static int64_t call_once(void) {
  int64_t t0 = now_ns();
  for (int64_t r = 0; r < regions; r++) {
    if (threads == 1) {
      sink = chain(steps, read_slice(r, 0));
    } else {
#pragma omp parallel num_threads(threads)
      {
        int t = omp_get_thread_num();
        double v = chain(steps, read_slice(r, t) + (double)t);
        if (v == 12345.0) sink = v;  // never true: keeps the chain live
      }
    }
  }
  return now_ns() - t0;
}

static int cmp64(const void* a, const void* b) {
  int64_t x = *(const int64_t*)a, y = *(const int64_t*)b;
  return (x > y) - (x < y);
}

static int64_t median_of(int n) {
  int64_t v[64];
  if (n > 64) n = 64;
  for (int i = 0; i < n; i++) v[i] = call_once();
  qsort(v, (size_t)n, sizeof v[0], cmp64);
  return v[n / 2];
}

static int parse_pos(const char* s, const char* what, int64_t* out) {
  char* end = NULL;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno != 0 || end == s || *end != '\0' || v < 1) {
    printf("error floor_worker: %s %s: want a positive integer\n", what, s);
    return -1;
  }
  *out = v;
  return 0;
}

int main(int argc, char** argv) {
  setvbuf(stdout, NULL, _IOFBF, 1 << 16);
  if (argc < 3 || argc > 5) {
    printf("error usage: floor_worker TARGET_NS THREADS [REGION_NS [WEIGHT_BYTES]]\n");
    return 2;
  }
  int64_t target, th, region = 100000, bytes = 0;
  if (parse_pos(argv[1], "TARGET_NS", &target) || parse_pos(argv[2], "THREADS", &th) ||
      (argc >= 4 && parse_pos(argv[3], "REGION_NS", &region)) ||
      (argc == 5 && parse_pos(argv[4], "WEIGHT_BYTES", &bytes))) {
    fflush(stdout);
    return 2;
  }
  if (target > 10LL * 1000 * 1000 * 1000 || th > 1024) {
    printf("error floor_worker: TARGET_NS %lld or THREADS %lld out of range\n", (long long)target, (long long)th);
    fflush(stdout);
    return 2;
  }
  threads = (int)th;
  regions = target / region;
  if (regions < 1) regions = 1;
  if (bytes == 0) bytes = target * 4;
  if (bytes < (64 << 10)) bytes = 64 << 10;
  if (bytes > (1LL << 30)) bytes = 1LL << 30;
  slice = bytes / (int64_t)sizeof(float) / (regions * threads) / 16 * 16;
  if (slice < 16) slice = 16;
  weights = malloc((size_t)(slice * regions * threads) * sizeof(float));
  if (weights == NULL) {
    printf("error floor_worker: out of memory for %lld bytes of weights\n", (long long)bytes);
    fflush(stdout);
    return 2;
  }
  for (int64_t i = 0; i < slice * regions * threads; i++) weights[i] = (float)(i % 1000) * 1e-3f;
  // Calibrate: the call without FMA work (the reads, the regions) is fixed; size the FMA
  // chain for the rest of the target, then correct it until within 2%.
  steps = 1;
  (void)median_of(5);
  int64_t base = median_of(15);
  int64_t m = base;
  if (base < target) {
    steps = 20000;
    m = median_of(15);
    for (int it = 0; it < 8; it++) {
      double f = (double)(target - base) / (double)(m > base ? m - base : 1);
      if (f > 0.98 && f < 1.02) break;
      if (f > 100) f = 100;
      int64_t next = (int64_t)((double)steps * f);
      steps = next < 1 ? 1 : next;
      m = median_of(15);
    }
  }
  m = median_of(21);
  printf("ready {\"threads\": %d, \"target_ns\": %lld, \"calibrated_ns\": %lld, \"regions\": %lld, \"steps\": %lld, "
         "\"weight_bytes\": %lld}\n",
         threads, (long long)target, (long long)m, (long long)regions, (long long)steps,
         (long long)(slice * regions * threads * (int64_t)sizeof(float)));
  fflush(stdout);
  char line[128];
  int64_t* ns = NULL;
  while (fgets(line, sizeof line, stdin) != NULL) {
    long long k = 0;
    if (strcmp(line, "quit\n") == 0 || strcmp(line, "quit") == 0) break;
    if (sscanf(line, "run %lld", &k) != 1 || k < 1 || k > 10000000) {
      printf("error want \"run K\" with 1 <= K <= 10000000, or \"quit\"\n");
      fflush(stdout);
      continue;
    }
    int64_t* grown = realloc(ns, (size_t)k * sizeof *ns);
    if (grown == NULL) {
      printf("error out of memory for %lld latencies\n", k);
      fflush(stdout);
      continue;
    }
    ns = grown;
    (void)call_once();  // untimed, as the other workers do
    for (long long i = 0; i < k; i++) ns[i] = call_once();
    fputs("ns", stdout);
    for (long long i = 0; i < k; i++) printf(" %lld", (long long)ns[i]);
    fputs("\n", stdout);
    fflush(stdout);
  }
  free(ns);
  free(weights);
  return 0;
}
