//go:build amd64 && !purego

package gmac

import "golang.org/x/sys/cpu"

// useAsm says the CPU runs the assembly: PCLMULQDQ, AES-NI and the SSE
// shuffles and inserts it uses.
var useAsm = cpu.X86.HasPCLMULQDQ && cpu.X86.HasAES && cpu.X86.HasSSSE3 && cpu.X86.HasSSE41

// encryptBlock encrypts src into dst with the AESENC schedule enc.
//
//go:noescape
func encryptBlock(enc *byte, rounds int, dst, src *[16]byte)

// initTable writes H^8 … H^1 (H = E(K, 0), given as bytes) and their
// Karatsuba halves into table.
//
//go:noescape
func initTable(table *[16][2]uint64, h *[16]byte)

// ghash folds head, n whole blocks at p and tail into acc (head and tail
// may be nil), eight blocks per reduction. With tag
// nil it writes acc back; otherwise it folds in the length block of bits
// of associated data and writes the hash in byte order XORed with
// E(K, j0) to tag.
//
//go:noescape
func ghash(table *[16][2]uint64, acc *[16]byte, head *[16]byte, p *byte, n int, tail *[16]byte, enc *byte, rounds int, j0 *[16]byte, bits uint64, tag *[16]byte)
