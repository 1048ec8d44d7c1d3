// Four doubles (two complex values) as one vector: GCC's vector extension,
// so that the compiler emits what the target has (one AVX register, or two
// SSE or NEON ones) and the numeric kernels name no instruction set.
#pragma once

namespace iotest {

using Vec4 = double __attribute__((vector_size(32)));

}  // namespace iotest
