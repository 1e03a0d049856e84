/* sim_lt.h - the simulated cuBLASLt's own interface for tests
 * (sim_cublaslt.c).
 * Owns: nothing but declarations.
 * Never does: exist outside test executables.
 */
#ifndef TD_SIM_LT_H
#define TD_SIM_LT_H

#ifdef __cplusplus
extern "C" {
#endif

/* cublasLtMatmul calls accepted in the whole process, by epilogue:
 * CUBLASLT_EPILOGUE_DEFAULT, _BIAS, _RELU_BIAS, _RELU, or either bias
 * gradient (_BGRADA and _BGRADB count together); -1: all.  Each also counts among cuBLAS's
 * GEMMs (td_sim_blas_gemms by the math its compute type means,
 * td_sim_blas_typed, td_sim_blas_tf32). */
long td_sim_blaslt_matmuls(int epilogue);
/* 1: cublasLtMatmulAlgoGetHeuristic finds no algorithm from now on
 * (CUBLAS_STATUS_NOT_SUPPORTED, no result), as for a shape the library
 * has no kernel for; 0: back to one algorithm. */
void td_sim_blaslt_no_algo(int on);

#ifdef __cplusplus
}
#endif

#endif
