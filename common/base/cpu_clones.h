#ifndef PS_COMMON_BASE_CPU_CLONES_H_
#define PS_COMMON_BASE_CPU_CLONES_H_

// PS_CPU_CLONES before a hot loop's function: GCC compiles it once for
// x86-64-v3 (AVX2, FMA) and once for the baseline (SSE2), and the dynamic
// loader picks the one the CPU can run (an ifunc), so one binary runs its
// update loops at AVX2 width wherever the machine has it. Elsewhere (another
// compiler or architecture) it is nothing.
//
// No x86-64-v4 (AVX-512) clone: measured on this project's machines
// (update_bench, docs/benchmarks.md), its 64-byte loops were 1.4x faster
// than AVX2 on cache-resident slices but up to 2x slower on slices streamed
// from memory (SGD on 64 MiB: 9.7 against 19-21 GB/s), which is what a
// server mostly updates.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define PS_CPU_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define PS_CPU_CLONES
#endif

#endif  // PS_COMMON_BASE_CPU_CLONES_H_
