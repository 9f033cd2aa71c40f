// DGRR_HD marks a function that the host and a CUDA device both compile from
// the same source (under nvcc it is __host__ __device__, elsewhere nothing):
// rng/philox.h's blocks and model/numerics.h's arithmetic, so that a CPU run
// and a GPU run compute the same bits.
#pragma once

#if defined(__CUDACC__)
#define DGRR_HD __host__ __device__
#else
#define DGRR_HD
#endif
