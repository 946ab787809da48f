package sha

// x8 is the eight-lane kernel's state: the lanes' hash states transposed
// (h[i][l] is word i of lane l) and where each lane's next block is. The
// assembly reads h at offset 0 and p at offset 160.
type x8 struct {
	h [5][8]uint32
	p [8]*byte
}
