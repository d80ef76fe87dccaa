// MatMul: the matrix products of the built-in models' layers, through an
// optimised BLAS when the process has one, else Eigen.
//
// Why: Eigen compiles its kernels for the build's instruction set, which is
// SSE2 in a default (portable) build; OpenBLAS picks this CPU's kernels at
// run time (AVX2, AVX-512), as PyTorch's products do through the same
// library. W3's 256×128×512 product ran 2.3–4× faster through OpenBLAS than
// through SSE2 Eigen on the benchmark machine (docs/PERFORMANCE.md).
//
// Thread-safe. Which library is used is decided once per process.
#ifndef PARALLAX_TRAINER_MODELS_MATMUL_H_
#define PARALLAX_TRAINER_MODELS_MATMUL_H_

#include "trainer/models/layers.h"

namespace parallax::models {

enum class MatMulBackend {
  kEigen,
  // cblas_sgemm of the BLAS linked in (libblas.so.3), used only when it is
  // OpenBLAS: the reference BLAS that libblas.so.3 is without it is slower
  // than Eigen.
  kBlas,
};

// kBlas when this build links a CBLAS and the library loaded is OpenBLAS.
MatMulBackend DefaultMatMulBackend();

// Sets the threads of the BLAS's products (process-wide), so that a model
// with `threads = 1` runs its products on its own thread; no-op without one.
void SetBlasThreads(int threads);

// c = op(a)·op(b) + beta·c, op(x) = xᵀ when trans_x. REQUIRES: shapes agree
// (c is rows(op(a)) × cols(op(b))), c does not alias a or b, and every map is
// contiguous (the default stride of a Matrix map).
void MatMul(const ConstMatMap& a, bool trans_a, const ConstMatMap& b, bool trans_b, float beta,
            MatMap c, MatMulBackend backend = DefaultMatMulBackend());

}  // namespace parallax::models

#endif  // PARALLAX_TRAINER_MODELS_MATMUL_H_
