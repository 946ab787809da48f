#!/usr/bin/env python3
"""Generates ../sha_amd64.s: SHA-1 and SHA-256 block functions on the SHA
extensions (SHA-NI), one stream or two streams interleaved. Run it from
anywhere: python3 _asm/gen.py (then go vet)."""
import os

# The round sequences follow Gulley et al., "New Instructions Supporting the
# Secure Hash Algorithm on Intel Architecture Processors" (2013). Each stream
# is a list of groups; a two-stream kernel emits group i of stream 0, then
# group i of stream 1, so that while one stream waits out a SHA instruction's
# latency the other's can issue. A group never leaves X0 (SHA256RNDS2's
# implicit operand) live for the next group, so groups of the two streams
# may alternate.


def sha256_streams(nstreams):
    """Returns (prologue, groups per stream, epilogue, the block loop's saves)."""
    regs = [dict(s0='X%d' % (1 + 7 * s), s1='X%d' % (2 + 7 * s),
                 m=['X%d' % (3 + 7 * s + i) for i in range(4)], t='X%d' % (7 + 7 * s),
                 h=['R8', 'R9'][s], p=['SI', 'DI'][s], save=32 * s)
            for s in range(nstreams)]
    shuf = 'X15'
    pro, epi, streams = [], [], []
    for r in regs:
        s0, s1, t, h = r['s0'], r['s1'], r['t'], r['h']
        pro += ['MOVOU (%s), %s' % (h, s0), 'MOVOU 16(%s), %s' % (h, s1),
                'PSHUFD $0xb1, %s, %s' % (s0, s0), 'PSHUFD $0x1b, %s, %s' % (s1, s1),
                'MOVO %s, %s' % (s0, t), 'PALIGNR $8, %s, %s' % (s1, s0),
                'PBLENDW $0xf0, %s, %s' % (t, s1)]
        epi += ['PSHUFD $0x1b, %s, %s' % (s0, s0), 'PSHUFD $0xb1, %s, %s' % (s1, s1),
                'MOVO %s, %s' % (s0, t), 'PBLENDW $0xf0, %s, %s' % (s1, s0),
                'PALIGNR $8, %s, %s' % (t, s1),
                'MOVOU %s, (%s)' % (s0, h), 'MOVOU %s, 16(%s)' % (s1, h)]
    for r in regs:
        s0, s1, m, t, p, sv = r['s0'], r['s1'], r['m'], r['t'], r['p'], r['save']
        g = [['MOVO %s, %d(BX)' % (s0, sv), 'MOVO %s, %d(BX)' % (s1, sv + 16)]]

        def rnds(c):
            return ['PADDD %d(AX), X0' % (c * 16), 'SHA256RNDS2 X0, %s, %s' % (s0, s1)]

        def rnds_hi():
            return ['PSHUFD $0x0e, X0, X0', 'SHA256RNDS2 X0, %s, %s' % (s1, s0)]
        # rounds 0-11: load, swap and keep the message words
        for c in range(3):
            x = ['MOVOU %d(%s), X0' % (c * 16, p), 'PSHUFB %s, X0' % shuf, 'MOVO X0, %s' % m[c]]
            x += rnds(c) + rnds_hi()
            if c > 0:
                x.append('SHA256MSG1 %s, %s' % (m[c], m[c - 1]))
            g.append(x)
        # rounds 12-59: the message schedule runs along
        order = [(3, 2, 0), (0, 3, 1), (1, 0, 2), (2, 1, 3)]
        for c in range(3, 15):
            mi, ai, ti = order[(c - 3) % 4]
            x = []
            if c == 3:
                x += ['MOVOU 48(%s), X0' % p, 'PSHUFB %s, X0' % shuf, 'MOVO X0, %s' % m[mi]]
            else:
                x.append('MOVO %s, X0' % m[mi])
            x += rnds(c)
            x += ['MOVO %s, %s' % (m[mi], t), 'PALIGNR $4, %s, %s' % (m[ai], t),
                  'PADDD %s, %s' % (t, m[ti]), 'SHA256MSG2 %s, %s' % (m[mi], m[ti])]
            x += rnds_hi()
            if c <= 12:
                x.append('SHA256MSG1 %s, %s' % (m[mi], m[ai]))
            g.append(x)
        # rounds 60-63
        g.append(['MOVO %s, X0' % m[3]] + rnds(15) + rnds_hi())
        g.append(['PADDD %d(BX), %s' % (sv, s0), 'PADDD %d(BX), %s' % (sv + 16, s1),
                  'ADDQ $64, %s' % p])
        streams.append(g)
    return pro, streams, epi


def sha1_streams(nstreams):
    regs = [dict(abcd='X%d' % (7 * s), e0='X%d' % (1 + 7 * s), e1='X%d' % (2 + 7 * s),
                 msg=['X%d' % (3 + 7 * s + i) for i in range(4)],
                 h=['R8', 'R9'][s], p=['SI', 'DI'][s], save=32 * s)
            for s in range(nstreams)]
    shuf = 'X14'
    pro, epi, streams = [], [], []
    for r in regs:
        abcd, e0, h = r['abcd'], r['e0'], r['h']
        pro += ['PXOR %s, %s' % (e0, e0), 'PINSRD $3, 16(%s), %s' % (h, e0),
                'MOVOU (%s), %s' % (h, abcd), 'PSHUFD $0x1b, %s, %s' % (abcd, abcd)]
        epi += ['PSHUFD $0x1b, %s, %s' % (abcd, abcd), 'MOVOU %s, (%s)' % (abcd, h),
                'PEXTRD $3, %s, 16(%s)' % (e0, h)]
    for r in regs:
        abcd, e0, e1, (msg0, msg1, msg2, msg3), p, sv = (
            r['abcd'], r['e0'], r['e1'], r['msg'], r['p'], r['save'])
        g = [['MOVO %s, %d(BX)' % (e0, sv), 'MOVO %s, %d(BX)' % (abcd, sv + 16)]]
        g.append(['MOVOU (%s), %s' % (p, msg0), 'PSHUFB %s, %s' % (shuf, msg0),
                  'PADDD %s, %s' % (msg0, e0), 'MOVO %s, %s' % (abcd, e1),
                  'SHA1RNDS4 $0, %s, %s' % (e0, abcd)])
        g.append(['MOVOU 16(%s), %s' % (p, msg1), 'PSHUFB %s, %s' % (shuf, msg1),
                  'SHA1NEXTE %s, %s' % (msg1, e1), 'MOVO %s, %s' % (abcd, e0),
                  'SHA1RNDS4 $0, %s, %s' % (e1, abcd), 'SHA1MSG1 %s, %s' % (msg1, msg0)])
        g.append(['MOVOU 32(%s), %s' % (p, msg2), 'PSHUFB %s, %s' % (shuf, msg2),
                  'SHA1NEXTE %s, %s' % (msg2, e0), 'MOVO %s, %s' % (abcd, e1),
                  'SHA1RNDS4 $0, %s, %s' % (e0, abcd), 'SHA1MSG1 %s, %s' % (msg2, msg1),
                  'PXOR %s, %s' % (msg2, msg0)])
        msgs = [msg3, msg0, msg1, msg2]
        for i in range(14):
            x = []
            a, b = e1, e0
            if i == 0:
                x += ['MOVOU 48(%s), %s' % (p, msg3), 'PSHUFB %s, %s' % (shuf, msg3)]
            if i % 2 == 1:
                a, b = e0, e1
            imm = (12 + i * 4) // 20
            x += ['SHA1NEXTE %s, %s' % (msgs[i % 4], a), 'MOVO %s, %s' % (abcd, b),
                  'SHA1MSG2 %s, %s' % (msgs[i % 4], msgs[(1 + i) % 4]),
                  'SHA1RNDS4 $%d, %s, %s' % (imm, a, abcd),
                  'SHA1MSG1 %s, %s' % (msgs[i % 4], msgs[(3 + i) % 4]),
                  'PXOR %s, %s' % (msgs[i % 4], msgs[(2 + i) % 4])]
            g.append(x)
        g.append(['SHA1NEXTE %s, %s' % (msg1, e1), 'MOVO %s, %s' % (abcd, e0),
                  'SHA1MSG2 %s, %s' % (msg1, msg2), 'SHA1RNDS4 $3, %s, %s' % (e1, abcd),
                  'PXOR %s, %s' % (msg1, msg3)])
        g.append(['SHA1NEXTE %s, %s' % (msg2, e0), 'MOVO %s, %s' % (abcd, e1),
                  'SHA1MSG2 %s, %s' % (msg2, msg3), 'SHA1RNDS4 $3, %s, %s' % (e0, abcd)])
        g.append(['SHA1NEXTE %s, %s' % (msg3, e1), 'MOVO %s, %s' % (abcd, e0),
                  'SHA1RNDS4 $3, %s, %s' % (e1, abcd)])
        g.append(['SHA1NEXTE %d(BX), %s' % (sv, e0), 'PADDD %d(BX), %s' % (sv + 16, abcd),
                  'ADDQ $64, %s' % p])
        streams.append(g)
    return pro, streams, epi


L = []
a = L.append
a('''// Code generated by _asm/gen.py. DO NOT EDIT.

//go:build amd64 && !purego

#include "textflag.h"

// SHA-1 and SHA-256 block functions on the SHA extensions. h points at the
// hash state words in the standard order (H0 first); p at n whole 64-byte
// blocks. The two-stream functions run two independent states over two
// inputs of n blocks each. The saved states live in a 16-byte aligned
// stack area that BX points at.

// func hasSHANI() bool
TEXT ·hasSHANI(SB), NOSPLIT, $0-1
	MOVL $7, AX
	XORL CX, CX
	CPUID
	SHRL $29, BX
	ANDL $1, BX
	MOVB BX, ret+0(FP)
	RET
''')


def kernel(name, args, frame, streams_fn, nstreams, sha256):
    a('')
    a('// func %s' % args)
    a('TEXT ·%s(SB), NOSPLIT, $%d-%d' % (name, 80, frame))
    if nstreams == 1:
        a('\tMOVQ h+0(FP), R8')
        a('\tMOVQ p+8(FP), SI')
        a('\tMOVQ n+16(FP), CX')
    else:
        a('\tMOVQ h0+0(FP), R8')
        a('\tMOVQ h1+8(FP), R9')
        a('\tMOVQ p0+16(FP), SI')
        a('\tMOVQ p1+24(FP), DI')
        a('\tMOVQ n+32(FP), CX')
    a('\tTESTQ CX, CX')
    a('\tJZ %s_done' % name)
    a('\tLEAQ 15(SP), BX')
    a('\tANDQ $~15, BX')
    if sha256:
        a('\tMOVOU sha256Flip<>(SB), X15')
        a('\tLEAQ sha256K<>(SB), AX')
    else:
        a('\tMOVOU sha1Flip<>(SB), X14')
    pro, streams, epi = streams_fn(nstreams)
    for i in pro:
        a('\t' + i)
    a('%s_loop:' % name)
    for gi in range(len(streams[0])):
        for s in streams:
            for i in s[gi]:
                a('\t' + i)
    a('\tDECQ CX')
    a('\tJNZ %s_loop' % name)
    for i in epi:
        a('\t' + i)
    a('%s_done:' % name)
    a('\tRET')


kernel('sha1Blocks', 'sha1Blocks(h *[8]uint32, p *byte, n int)', 24, sha1_streams, 1, False)
kernel('sha1Blocks2', 'sha1Blocks2(h0, h1 *[8]uint32, p0, p1 *byte, n int)', 40, sha1_streams, 2, False)
kernel('sha256Blocks', 'sha256Blocks(h *[8]uint32, p *byte, n int)', 24, sha256_streams, 1, True)
kernel('sha256Blocks2', 'sha256Blocks2(h0, h1 *[8]uint32, p0, p1 *byte, n int)', 40, sha256_streams, 2, True)

K = [0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
     0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
     0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
     0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
     0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
     0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
     0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
     0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2]
a('')
a('// The round constants, four to a 16-byte row.')
for i in range(0, 64, 2):
    a('DATA sha256K<>+%d(SB)/8, $0x%08x%08x' % (i * 4, K[i + 1], K[i]))
a('GLOBL sha256K<>(SB), RODATA|NOPTR, $256')
a('')
a('// Byte swaps of the 32-bit message words.')
a('DATA sha256Flip<>+0(SB)/8, $0x0405060700010203')
a('DATA sha256Flip<>+8(SB)/8, $0x0c0d0e0f08090a0b')
a('GLOBL sha256Flip<>(SB), RODATA|NOPTR, $16')
a('')
a('// SHA-1 reverses the whole block: the words in the order SHA1RNDS4 takes.')
a('DATA sha1Flip<>+0(SB)/8, $0x08090a0b0c0d0e0f')
a('DATA sha1Flip<>+8(SB)/8, $0x0001020304050607')
a('GLOBL sha1Flip<>(SB), RODATA|NOPTR, $16')

out = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'sha_amd64.s')
with open(out, 'w') as f:
    f.write('\n'.join(L) + '\n')
