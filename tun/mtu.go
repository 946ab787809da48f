package tun

import "fmt"

// Overhead describes what an ESP tunnel adds around an inner packet. Fill it
// from the SA's suite and the outer transport.
type Overhead struct {
	OuterIP   int // outer IP header: 20 (IPv4) or 40 (IPv6)
	UDP       int // 8 with UDP encapsulation (RFC 3948), else 0
	ESPHeader int // SPI + sequence number: 8
	IV        int // explicit IV per packet (16 AES-CBC, 8 GCM/CTR/3DES, 0 NULL)
	Block     int // alignment of payload+padding+trailer (cipher block, at least 4)
	ICV       int // integrity check value (12 for HMAC-SHA1-96, 16 for GCM-16 ...)
}

// espTrailer is the pad-length and next-header bytes that follow the padding.
const espTrailer = 2

// Validate reports the first field outside its meaningful range.
func (o Overhead) Validate() error {
	switch {
	case o.OuterIP != 20 && o.OuterIP != 40:
		return fmt.Errorf("outer IP header length %d: must be 20 (IPv4) or 40 (IPv6)", o.OuterIP)
	case o.UDP != 0 && o.UDP != 8:
		return fmt.Errorf("UDP header length %d: must be 0 or 8", o.UDP)
	case o.ESPHeader < 8:
		return fmt.Errorf("ESP header length %d: must be at least 8 (SPI and sequence number)", o.ESPHeader)
	case o.IV < 0 || o.IV > 64:
		return fmt.Errorf("IV length %d: must be 0..64", o.IV)
	case o.Block < 1 || o.Block > 255:
		return fmt.Errorf("block length %d: must be 1..255", o.Block)
	case o.ICV < 0 || o.ICV > 64:
		return fmt.Errorf("ICV length %d: must be 0..64", o.ICV)
	}
	return nil
}

// align is the boundary the ESP payload must end on: the cipher block, and
// never less than 4 bytes (RFC 4303 §2.4).
func (o Overhead) align() int {
	a := o.Block
	if a < 4 {
		a = 4
	}
	// Any multiple of 4 works too, but the boundary must be a multiple of 4
	// so the ICV is 4-byte aligned: round a non-multiple (e.g. 3) up.
	if a%4 != 0 {
		a = lcm(a, 4)
	}
	return a
}

func lcm(a, b int) int {
	x, y := a, b
	for y != 0 {
		x, y = y, x%y
	}
	return a / x * b
}

// InnerMTU returns the largest inner packet whose ESP packet, padded to the
// block boundary, fits in outerMTU, so a path of outerMTU bytes never
// fragments the tunnel's packets.
func InnerMTU(outerMTU int, o Overhead) (int, error) {
	if err := o.Validate(); err != nil {
		return 0, fmt.Errorf("inner MTU for outer MTU %d: %w", outerMTU, err)
	}
	fixed := o.OuterIP + o.UDP + o.ESPHeader + o.IV + o.ICV
	a := o.align()
	room := (outerMTU - fixed) / a * a // largest aligned payload that fits
	inner := room - espTrailer
	if outerMTU-fixed < 0 || inner < 68 {
		return 0, fmt.Errorf("inner MTU for outer MTU %d: ESP overhead of %d+ bytes leaves %d for the inner packet, below IPv4's minimum of 68", outerMTU, fixed+espTrailer, max(inner, 0))
	}
	return inner, nil
}
