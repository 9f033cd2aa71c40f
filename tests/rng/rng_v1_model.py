#!/usr/bin/env python3
"""Independent model of docs/rng.md ("dgrr rng v1"), written from the spec,
not from the C++ code. It produced the worked-example values that
tests/rng/stream_test.cc (StreamId.MatchesTheWorkedExampleInTheSpec) checks.
Run: python3 tests/rng/rng_v1_model.py"""
import math
import struct

M64 = (1 << 64) - 1
M32 = (1 << 32) - 1
DOMAIN_TAG = 0x646772722D726E01
KEY_IV = 0x646772722D6B6579
SUBSEQUENCE_IV = 0x646772722D736571
PURPOSE = {"init": 1, "dropout": 2, "shuffle": 3, "augment": 4, "noise": 5}


def mix_splitmix64(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def mix_murmur3(z):
    z = ((z ^ (z >> 33)) * 0xFF51AFD7ED558CCD) & M64
    z = ((z ^ (z >> 33)) * 0xC4CEB9FE1A85EC53) & M64
    return z ^ (z >> 33)


def stream_id(seed, purpose, coords):
    words = [DOMAIN_TAG, seed, purpose, len(coords)] + list(coords) + [0] * (4 - len(coords))
    a, b = KEY_IV, SUBSEQUENCE_IV
    for w in words:
        a = mix_splitmix64(a ^ w)
        b = mix_murmur3(b ^ w)
    return mix_splitmix64(a), mix_murmur3(b)


def philox4x32(counter, key, rounds=10):
    c = list(counter)
    k0, k1 = key
    for r in range(rounds):
        if r:
            k0, k1 = (k0 + 0x9E3779B9) & M32, (k1 + 0xBB67AE85) & M32
        p0, p1 = 0xD2511F53 * c[0], 0xCD9E8D57 * c[2]
        c = [(p1 >> 32) ^ c[1] ^ k0, p1 & M32, (p0 >> 32) ^ c[3] ^ k1, p0 & M32]
    return c


class Stream:
    def __init__(self, key, subsequence, position=0):
        self.key, self.subsequence, self.position = key, subsequence, position

    def next_u32(self):
        block = self.position // 4
        counter = [block & M32, block >> 32, self.subsequence & M32, self.subsequence >> 32]
        value = philox4x32(counter, [self.key & M32, self.key >> 32])[self.position % 4]
        self.position += 1
        return value

    def next_u64(self):
        low = self.next_u32()
        return low | (self.next_u32() << 32)


def to_f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def uniform_float(u):
    return to_f32(to_f32(float(u)) * 2.0**-32 + 2.0**-33)


def normal_pair(s):
    x, y = s.next_u64(), s.next_u64()
    u1 = ((x >> 11) + 1) * 2.0**-53
    u2 = (y >> 11) * 2.0**-53
    r = math.sqrt(-2.0 * math.log(u1))
    theta = 6.283185307179586 * u2
    return r * math.cos(theta), r * math.sin(theta)


def uniform_below(s, bound):
    m = s.next_u32() * bound
    if (m & M32) < bound:
        reject_below = ((1 << 32) - bound) % bound
        while (m & M32) < reject_below:
            m = s.next_u32() * bound
    return m >> 32


def epoch_permutation(seed, epoch, n):
    s = Stream(*stream_id(seed, PURPOSE["shuffle"], [epoch]))
    order = list(range(n))
    for i in range(n - 1, 0, -1):
        j = uniform_below(s, i + 1)
        order[i], order[j] = order[j], order[i]
    return order


if __name__ == "__main__":
    assert philox4x32([0, 0, 0, 0], [0, 0]) == [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]
    key, subsequence = stream_id(20240601, PURPOSE["dropout"], [3, 17, 2, 1])
    print("key         = 0x%016x" % key)
    print("subsequence = 0x%016x" % subsequence)
    s = Stream(key, subsequence)
    print("draws 0..7  =", " ".join("%08x" % s.next_u32() for _ in range(8)))
    f = uniform_float(Stream(key, subsequence).next_u32())
    print("UniformFloat(draw 0) = 0x%08x (%.8f)" % (struct.unpack("<I", struct.pack("<f", f))[0], f))
    print("NormalPair(draws 0..3) =", normal_pair(Stream(key, subsequence)))
    print("EpochPermutation(1234, 7, 10) =", epoch_permutation(1234, 7, 10))
