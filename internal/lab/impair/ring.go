package impair

// fifo is a ring of packets that grows by doubling and never shrinks, so a
// stage in steady state queues without allocating.
type fifo struct {
	buf        []*Packet
	head, size int
}

func (q *fifo) len() int { return q.size }

func (q *fifo) push(p *Packet) {
	if q.size == len(q.buf) {
		n := make([]*Packet, max(16, 2*len(q.buf)))
		for i := 0; i < q.size; i++ {
			n[i] = q.buf[(q.head+i)%len(q.buf)]
		}
		q.buf, q.head = n, 0
	}
	q.buf[(q.head+q.size)%len(q.buf)] = p
	q.size++
}

// count is the number of packets queued that f holds true of.
func (q *fifo) count(f func(*Packet) bool) int {
	n := 0
	for i := 0; i < q.size; i++ {
		if f(q.buf[(q.head+i)%len(q.buf)]) {
			n++
		}
	}
	return n
}

func (q *fifo) peek() *Packet { return q.buf[q.head] }

func (q *fifo) pop() *Packet {
	p := q.buf[q.head]
	q.buf[q.head] = nil
	q.head = (q.head + 1) % len(q.buf)
	q.size--
	return p
}
