/* Little-endian fixed-size fields of collab's binary messages (private). */
#ifndef DEDLOC_COLLAB_BYTES_H
#define DEDLOC_COLLAB_BYTES_H

#include <stdint.h>
#include <string.h>

static inline void dl_put_u16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }
static inline void dl_put_u32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline void dl_put_u64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline void dl_put_f64(uint8_t *p, double v) {
    uint64_t u;
    memcpy(&u, &v, 8);
    dl_put_u64(p, u);
}
static inline uint16_t dl_get_u16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static inline uint32_t dl_get_u32(const uint8_t *p) {
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}
static inline uint64_t dl_get_u64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}
static inline double dl_get_f64(const uint8_t *p) {
    uint64_t u = dl_get_u64(p);
    double v;
    memcpy(&v, &u, 8);
    return v;
}

#endif
