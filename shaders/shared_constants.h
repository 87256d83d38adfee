// Constants that C++ and GLSL must agree on. Included by both.
#ifndef EAGLEVK_SHARED_CONSTANTS_H
#define EAGLEVK_SHARED_CONSTANTS_H

// The matrix-vector kernel keeps one accumulator per activation row in registers.
#define MATVEC_MAX_ROWS 8
// Largest head_dim the attention kernel keeps in shared memory.
#define ATTENTION_MAX_HEAD_DIM 256

#endif
