package aesni

import (
	"crypto/subtle"

	"github.com/espgw/espgw/offload"
	"github.com/espgw/espgw/offload/aesni/internal/sha"
	"github.com/espgw/espgw/sa"
)

// laneHash is the hash of the HMACs that package sha runs in lanes.
func laneHash(a sa.Auth) (sha.Hash, bool) {
	switch a {
	case sa.AuthHMACSHA1_96:
		return sha.SHA1, true
	case sa.AuthHMACSHA256_128:
		return sha.SHA256, true
	}
	return 0, false
}

// initLanes precomputes the session's HMAC states for package sha, if its
// HMAC is one that package runs and this CPU runs its assembly: package
// sha's Go fallback is slower than the standard library's SHA assembly, so
// without the SHA extensions the HMAC stays on the standard library.
func (s *Session) initLanes(a sa.Auth, key []byte) error {
	h, ok := laneHash(a)
	if !ok || !sha.Accelerated() {
		return nil
	}
	if err := s.laneKey.Init(h, key); err != nil {
		return err
	}
	s.lanes = true
	return nil
}

// macBatch gathers the HMACs of a worker's batch for one run of package
// sha's lanes: the ICVs of encrypted seals, or the checks of opens before
// they are decrypted.
type macBatch struct {
	macer sha.Macer
	jobs  []sha.Job
	ops   []*offload.Op
	sums  [sealChunk][sha.MaxSize]byte
}

func newMacBatch() *macBatch {
	return &macBatch{jobs: make([]sha.Job, 0, sealChunk), ops: make([]*offload.Op, 0, sealChunk)}
}

// add queues the HMAC of what op's ICV covers; at most sealChunk between
// runs.
func (b *macBatch) add(s *Session, op *offload.Op) {
	b.jobs = append(b.jobs, sha.Job{Key: &s.laneKey, Data: op.Bytes(op.Auth), ESN: s.esn, SeqHi: op.SeqHi, Sum: &b.sums[len(b.jobs)]})
	b.ops = append(b.ops, op)
}

func (b *macBatch) full() bool { return len(b.jobs) == cap(b.jobs) }

// seal MACs the queued seals into their ICVs and gives them their Status.
func (b *macBatch) seal() {
	if len(b.jobs) == 0 {
		return
	}
	err := b.macer.MACBatch(b.jobs)
	for i, op := range b.ops {
		if err != nil {
			op.Status = offload.Failed
			continue
		}
		icvLen := op.Session.(*Session).icvLen
		copy(op.Bytes(op.ICV), b.sums[i][:icvLen])
		op.Status = offload.OK
	}
	b.reset()
}

// open checks the queued opens' ICVs in constant time and decrypts those
// that match.
func (b *macBatch) open() {
	if len(b.jobs) == 0 {
		return
	}
	err := b.macer.MACBatch(b.jobs)
	for i, op := range b.ops {
		s := op.Session.(*Session)
		icv := op.Bytes(op.ICV)
		switch {
		case err != nil:
			op.Status = offload.Failed
		case subtle.ConstantTimeCompare(b.sums[i][:s.icvLen], icv) != 1:
			op.Status = offload.BadICV
		default:
			s.decrypt(op)
		}
	}
	b.reset()
}

func (b *macBatch) reset() {
	clear(b.jobs)
	clear(b.ops)
	clear(b.sums[:len(b.jobs)])
	b.jobs, b.ops = b.jobs[:0], b.ops[:0]
}
