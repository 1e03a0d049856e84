/* sim_bnex.h - the simulated cuDNN's extended batch norm calls
 * (sim_cudnn_bnex.c): what tests read of them.
 *
 * Owns: the counters of the fused calls and of reserve-space mismatches.
 * Never does: anything but declare.
 */
#ifndef TD_SIM_BNEX_H
#define TD_SIM_BNEX_H

#ifdef __cplusplus
extern "C" {
#endif

/* Fused (bnOps BN_ACTIVATION or BN_ADD_ACTIVATION) calls accepted since
 * the process started: bwd 0 cudnnBatchNormalizationForwardTrainingEx,
 * 1 cudnnBatchNormalizationBackwardEx. */
long td_sim_bnex_calls(int bwd);

/* Fused backward calls that ran with a reserve space their forward did
 * not write (wrong buffer, other x, other bnOps, or a ReLU mask that is
 * not y's): each printed a diagnostic and filled dx with NaN. */
long td_sim_bnex_bad_reserve(void);

#ifdef __cplusplus
}
#endif

#endif
