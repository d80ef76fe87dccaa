#include "trainer/models/matmul.h"

#include <gtest/gtest.h>

#include <random>

namespace parallax::models {
namespace {

Matrix Random(Eigen::Index rows, Eigen::Index cols, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  Matrix m(rows, cols);
  for (Eigen::Index i = 0; i < m.size(); ++i) m.data()[i] = u(gen);
  return m;
}

// op(a)·op(b) + beta·c in double, element by element.
Matrix Naive(const Matrix& a, bool ta, const Matrix& b, bool tb, float beta, const Matrix& c) {
  Matrix out(c.rows(), c.cols());
  const Eigen::Index k = ta ? a.rows() : a.cols();
  for (Eigen::Index i = 0; i < out.rows(); ++i) {
    for (Eigen::Index j = 0; j < out.cols(); ++j) {
      double sum = beta * static_cast<double>(c(i, j));
      for (Eigen::Index l = 0; l < k; ++l) {
        sum += static_cast<double>(ta ? a(l, i) : a(i, l)) * (tb ? b(j, l) : b(l, j));
      }
      out(i, j) = static_cast<float>(sum);
    }
  }
  return out;
}

void ExpectProducts(MatMulBackend backend) {
  const Eigen::Index m = 37, k = 29, n = 53;  // odd sizes: no kernel-sized shortcut
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      for (float beta : {0.0f, 0.5f}) {
        const Matrix a = ta ? Random(k, m, 1) : Random(m, k, 1);
        const Matrix b = tb ? Random(n, k, 2) : Random(k, n, 2);
        const Matrix c0 = Random(m, n, 3);
        Matrix c = c0;
        MatMul(ConstMatMap(a.data(), a.rows(), a.cols()), ta,
               ConstMatMap(b.data(), b.rows(), b.cols()), tb, beta,
               MatMap(c.data(), c.rows(), c.cols()), backend);
        const Matrix want = Naive(a, ta, b, tb, beta, c0);
        EXPECT_LT((c - want).cwiseAbs().maxCoeff(), 1e-4f)
            << "trans_a " << ta << " trans_b " << tb << " beta " << beta;
      }
    }
  }
}

TEST(MatMulTest, EigenComputesEveryTransposeAndBeta) { ExpectProducts(MatMulBackend::kEigen); }

TEST(MatMulTest, DefaultBackendComputesEveryTransposeAndBeta) {
  // kBlas where libblas.so.3 is OpenBLAS (scripts/install-deps installs it), kEigen elsewhere.
  ExpectProducts(DefaultMatMulBackend());
}

TEST(MatMulTest, BlasComputesEveryTransposeAndBeta) {
  if (DefaultMatMulBackend() != MatMulBackend::kBlas) {
    GTEST_SKIP() << "libblas.so.3 is not OpenBLAS here: the models use Eigen";
  }
  SetBlasThreads(1);
  ExpectProducts(MatMulBackend::kBlas);
}

}  // namespace
}  // namespace parallax::models
