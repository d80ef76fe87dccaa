#include "trainer/models/matmul.h"

#include <dlfcn.h>

#include "core/base/logging.h"

#ifdef PARALLAX_HAVE_CBLAS
#include <cblas.h>
#endif

namespace parallax::models {
namespace {

using SetThreadsFn = void (*)(int);

// OpenBLAS's own entry point: present only when libblas.so.3 is OpenBLAS.
SetThreadsFn OpenBlasSetThreads() {
#ifdef PARALLAX_HAVE_CBLAS
  static const SetThreadsFn fn =
      reinterpret_cast<SetThreadsFn>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
  return fn;
#else
  return nullptr;
#endif
}

template <typename A, typename B>
void EigenProduct(const A& a, const B& b, float beta, MatMap c) {
  if (beta == 0.0f) {
    c.noalias() = a * b;
  } else {
    c *= beta;
    c.noalias() += a * b;
  }
}

}  // namespace

MatMulBackend DefaultMatMulBackend() {
  return OpenBlasSetThreads() != nullptr ? MatMulBackend::kBlas : MatMulBackend::kEigen;
}

void SetBlasThreads(int threads) {
  if (SetThreadsFn fn = OpenBlasSetThreads()) fn(threads);
}

void MatMul(const ConstMatMap& a, bool trans_a, const ConstMatMap& b, bool trans_b, float beta,
            MatMap c, MatMulBackend backend) {
  const Eigen::Index m = trans_a ? a.cols() : a.rows();
  const Eigen::Index k = trans_a ? a.rows() : a.cols();
  const Eigen::Index n = trans_b ? b.rows() : b.cols();
  PX_CHECK(k == (trans_b ? b.cols() : b.rows()) && c.rows() == m && c.cols() == n)
      << "MatMul shapes: op(a) " << m << "x" << k << ", op(b) " << (trans_b ? b.cols() : b.rows())
      << "x" << n << ", c " << c.rows() << "x" << c.cols();
#ifdef PARALLAX_HAVE_CBLAS
  if (backend == MatMulBackend::kBlas && m > 0 && n > 0 && k > 0) {
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, static_cast<int>(m), static_cast<int>(n),
                static_cast<int>(k), 1.0f, a.data(), static_cast<int>(a.cols()), b.data(),
                static_cast<int>(b.cols()), beta, c.data(), static_cast<int>(c.cols()));
    return;
  }
#else
  (void)backend;
#endif
  if (trans_a && trans_b) {
    EigenProduct(a.transpose(), b.transpose(), beta, c);
  } else if (trans_a) {
    EigenProduct(a.transpose(), b, beta, c);
  } else if (trans_b) {
    EigenProduct(a, b.transpose(), beta, c);
  } else {
    EigenProduct(a, b, beta, c);
  }
}

}  // namespace parallax::models
