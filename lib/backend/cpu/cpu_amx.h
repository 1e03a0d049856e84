/* cpu_amx.h - what the CPU backend's AMX kernels (cpu_bwdw.c, cpu_cfwd.c)
 * share: their target attribute and the loading of a tile configuration.
 *
 * Owns: palette 1 with 8 tiles of 64-byte rows, loaded on the calling
 * thread (AMX state is per thread; _tile_release ends it).
 * Never does: decide whether AMX is usable (td_bwdw_amx in cpu_bwdw.h).
 */
#ifndef TD_BACKEND_CPU_AMX_H
#define TD_BACKEND_CPU_AMX_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#define TD_AMX_FN                                                            \
    __attribute__((target("avx512f,avx512bw,avx512vl,amx-tile,amx-bf16")))

typedef struct td_amx_cfg {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} td_amx_cfg;

/* Tiles 0-7 with 64-byte rows, tile t rows[t] rows high. */
TD_AMX_FN static inline void td_amx_load(const uint8_t rows[8])
{
    td_amx_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; t++) {
        cfg.rows[t] = rows[t];
        cfg.colsb[t] = 64;
    }
    /* gcc 12's _tile_loadconfig tells the compiler it reads 8 bytes:
     * without this the other stores to cfg may be dropped (#GP) */
    __asm__ volatile("" : : "r"(&cfg) : "memory");
    _tile_loadconfig(&cfg);
}

#endif
