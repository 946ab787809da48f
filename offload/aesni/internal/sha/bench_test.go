package sha

import (
	"crypto/hmac"
	"fmt"
	"testing"
)

// BenchmarkMAC times a batch of 8 equal packets three ways per hash and
// size: the standard library's HMAC with its states restored (Std: what
// crypto/hmac does per message, less the pad hashing), one stream per
// packet (Single) and the lanes (Batch). Bytes are the batch's data.
func BenchmarkMAC(b *testing.B) {
	const batch = 8
	for _, h := range []Hash{SHA1, SHA256} {
		for _, size := range []int{64, 256, 1024, 1420, 8192} {
			k, _ := NewKey(h, []byte("0123456789abcdef0123"))
			data := make([]byte, batch*size)
			sums := make([][MaxSize]byte, batch)
			jobs := make([]Job, batch)
			for i := range jobs {
				jobs[i] = Job{Key: k, Data: data[i*size : (i+1)*size], ESN: true, Sum: &sums[i]}
			}
			b.Run(fmt.Sprintf("%s/%d/Std", h, size), func(b *testing.B) {
				m := hmac.New(newStd(h), []byte("0123456789abcdef0123"))
				b.SetBytes(int64(batch * size))
				for b.Loop() {
					for i := range jobs {
						m.Reset()
						m.Write(jobs[i].Data)
						m.Write([]byte{0, 0, 0, 0})
						m.Sum(sums[i][:0])
					}
				}
			})
			b.Run(fmt.Sprintf("%s/%d/Single", h, size), func(b *testing.B) {
				b.SetBytes(int64(batch * size))
				for b.Loop() {
					for i := range jobs {
						_ = k.MAC(&sums[i], jobs[i].Data, true, 0)
					}
				}
			})
			b.Run(fmt.Sprintf("%s/%d/Batch", h, size), func(b *testing.B) {
				var m Macer
				b.SetBytes(int64(batch * size))
				for b.Loop() {
					_ = m.MACBatch(jobs)
				}
			})
		}
	}
}
