// A user's program built against the installed ringgrad package (see tests/install/).
// It checks that the public headers compile from the install tree, that the static library's link-only
// dependencies (OpenBLAS for matmul, the CUDA runtime when the package was built with CUDA) resolve,
// and that autograd works, by comparing against values worked out by hand. Exit code 0 on success.
#include <ringgrad.h>

#include <cmath>
#include <cstdio>
#include <exception>
#include <vector>

namespace rg = ringgrad;

static int failures = 0;

static void expect_near(const char* what, double got, double want) {
  const bool ok = std::fabs(got - want) <= 1e-5 * (1.0 + std::fabs(want));
  std::printf("%-28s got %-10g want %-10g %s\n", what, got, want, ok ? "ok" : "MISMATCH");
  if (!ok) ++failures;
}

int main() {
  try {
    // matmul through BLAS: [[1, 2], [3, 4]] @ [[5, 6], [7, 8]] = [[19, 22], [43, 50]]
    rg::Tensor a = rg::from_vector(std::vector<float>{1, 2, 3, 4}, {2, 2});
    rg::Tensor b = rg::from_vector(std::vector<float>{5, 6, 7, 8}, {2, 2});
    std::vector<double> c = rg::matmul(a, b).to_vector();
    const double want_c[] = {19, 22, 43, 50};
    for (int i = 0; i < 4; ++i) expect_near("matmul(a, b) element", c[i], want_c[i]);

    // autograd: y = sum(x * x + 3x)  =>  dy/dx = 2x + 3
    rg::Tensor x = rg::from_vector(std::vector<float>{-1, 0.5f, 2}, {3});
    x.requires_grad_();
    rg::Tensor y = rg::sum(x * x + x * 3.0);
    y.backward();
    expect_near("y", y.item(), (1 - 3) + (0.25 + 1.5) + (4 + 6));
    std::vector<double> dx = x.grad().to_vector();
    const double want_dx[] = {1, 4, 7};
    for (int i = 0; i < 3; ++i) expect_near("dy/dx element", dx[i], want_dx[i]);

    // Calls into the CUDA runtime when the package has CUDA (0 devices is fine).
    std::printf("cuda compiled: %s, devices: %d\n", rg::cuda_compiled() ? "yes" : "no", rg::cuda_device_count());
  } catch (const std::exception& e) {
    std::printf("error: %s\n", e.what());
    return 1;
  }
  std::printf("%s\n", failures ? "FAILED: values differ from the expected ones" : "all values as expected");
  return failures ? 1 : 0;
}
