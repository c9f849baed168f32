#!/usr/bin/env python3
"""Independent reference values for tests/util/test_util.c and
tests/net/test_net_codec.c, computed without dedloc's code:

- xxh64 from the `xxhash` package (PyPI, the xxHash project's bindings);
- BLAKE2b from Python's hashlib (its own BLAKE2 implementation);
- dl_rng (src/util/hash_rng_time.c): xoshiro256** seeded by four splitmix64
  outputs, written below from the published algorithms (Blackman & Vigna,
  prng.di.unimi.it), then dl_rng_uniform / dl_rng_below / dl_rng_normal from
  the definitions in include/dedloc/util.h.

    $REFENV/bin/python scripts/util_reference_values.py

prints the values as C initialisers; the tests hold them as constants.
"""
import hashlib
import math
import struct

import xxhash

M64 = (1 << 64) - 1


def pattern(n):
    """The bytes the C test hashes: (i * 7 + 3) mod 256."""
    return bytes((i * 7 + 3) & 255 for i in range(n))


class Xoshiro256ss:
    def __init__(self, seed):
        x = seed & M64
        self.s = []
        for _ in range(4):  # splitmix64
            x = (x + 0x9E3779B97F4A7C15) & M64
            z = x
            z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
            z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
            self.s.append(z ^ (z >> 31))

    @staticmethod
    def rotl(x, k):
        return ((x << k) | (x >> (64 - k))) & M64

    def next(self):
        s = self.s
        result = (self.rotl((s[1] * 5) & M64, 7) * 9) & M64
        t = (s[1] << 17) & M64
        s[2] ^= s[0]
        s[3] ^= s[1]
        s[1] ^= s[2]
        s[0] ^= s[3]
        s[2] ^= t
        s[3] = self.rotl(s[3], 45)
        return result

    def uniform(self):  # top 24 bits / 2^24, a float
        return (self.next() >> 40) / 16777216.0

    def below(self, n):  # rejection of the top partial range, then modulo
        limit = M64 - (M64 % n)
        while True:
            x = self.next()
            if x < limit:
                return x % n

    def normal(self):  # Box-Muller, cosine branch, u1 in (0, 1]
        u1 = ((self.next() >> 11) + 1.0) * (1.0 / 9007199254740993.0)
        u2 = (self.next() >> 11) * (1.0 / 9007199254740992.0)
        v = math.sqrt(-2.0 * math.log(u1)) * math.cos(6.283185307179586 * u2)
        return struct.unpack("f", struct.pack("f", v))[0]  # rounded to float


def main():
    print(f"/* xxhash {xxhash.VERSION} */")
    for data, seed, what in [
        (b"", 0, '""'), (b"", 1, '"", seed 1'), (b"a", 0, '"a"'), (b"abc", 0, '"abc"'),
        (b"abc", 0x9E3779B97F4A7C15, '"abc", seed 0x9e3779b97f4a7c15'),
        (pattern(31), 0, "pattern(31)"), (pattern(32), 0, "pattern(32)"),
        (pattern(33), 7, "pattern(33), seed 7"), (pattern(1000), 0, "pattern(1000)"),
        (pattern(1000), 123456789, "pattern(1000), seed 123456789"),
    ]:
        print(f"{{{len(data)}, {seed:#x}ull, {xxhash.xxh64_intdigest(data, seed=seed):#018x}ull}}, /* {what} */")
    print("/* BLAKE2b-512(\"abc\") */")
    print(hashlib.blake2b(b"abc").hexdigest())
    print("/* BLAKE2b-128 of the 32 bytes 0, 1, ..., 31 (dl_peer_id_from_pk) */")
    print(hashlib.blake2b(bytes(range(32)), digest_size=16).hexdigest())
    for seed in (0, 42):
        r = Xoshiro256ss(seed)
        print(f"/* dl_rng_next, seed {seed} */")
        print(", ".join(f"{r.next():#018x}ull" for _ in range(6)))
    r = Xoshiro256ss(7)
    print("/* seed 7: 4 uniform, 4 below(1000), 4 normal */")
    print(", ".join(f"{r.uniform()!r}f" for _ in range(4)))
    print(", ".join(str(r.below(1000)) for _ in range(4)))
    print(", ".join(f"{r.normal():.9g}f" for _ in range(4)))


if __name__ == "__main__":
    main()
