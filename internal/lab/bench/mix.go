package bench

import (
	"fmt"
	"strconv"
	"strings"
)

// Ethernet framing that RFC 2544 frame sizes include but the tunnel never
// sees: 14 bytes of header and a 4-byte FCS. A frame of size F carries an IP
// packet of F-18 bytes; the probe's UDP payload is F-18-28 over IPv4.
const (
	ethOverhead = 18
	ipv4UDPHdr  = 28
	// MinFrame is the smallest frame whose payload holds a probe header.
	MinFrame = ethOverhead + ipv4UDPHdr + probeHeader
	// MaxFrame is the largest frame whose IP packet fits every tunnel the
	// bench builds (espgw's inner MTU is 1438, wireguard-go's 1420).
	MaxFrame = 1400 + ethOverhead
)

// StandardFrames are the frame sizes measured by default, in bytes; IMIX is
// measured next to them.
var standardFrames = []int{64, 128, 256, 512, 1024, 1280, 1400}

// Mix is the frame sizes of a load, sent in this order over and over.
type Mix struct {
	Name   string `json:"name"`
	Frames []int  `json:"frames"`
}

// Single is a load of one frame size.
func Single(frame int) Mix { return Mix{Name: strconv.Itoa(frame), Frames: []int{frame}} }

// IMIX is the simple Internet mix, 7:4:1 of 64, 594 and the largest frame,
// interleaved so that no burst is all large or all small. The classic mix
// ends at 1518; here the large frame is 1400, the largest the tunnels carry
// without fragmenting.
func IMIX() Mix {
	return Mix{Name: "imix", Frames: []int{64, 594, 64, 1400, 64, 594, 64, 594, 64, 64, 594, 64}}
}

// MeanFrame is the mix's average frame size in bytes.
func (m Mix) MeanFrame() float64 {
	sum := 0
	for _, f := range m.Frames {
		sum += f
	}
	return float64(sum) / float64(len(m.Frames))
}

// IsIMIX reports whether the mix is more than one size.
func (m Mix) IsIMIX() bool { return len(m.Frames) > 1 }

// ParseMixes reads a list like "64,512,1400,imix"; "all" is the standard
// sizes and IMIX.
func ParseMixes(s string) ([]Mix, error) {
	var out []Mix
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(strings.ToLower(f))
		switch f {
		case "":
			continue
		case "all":
			for _, n := range standardFrames {
				out = append(out, Single(n))
			}
			out = append(out, IMIX())
		case "imix":
			out = append(out, IMIX())
		default:
			n, err := strconv.Atoi(f)
			if err != nil {
				return nil, fmt.Errorf("frame size %q: want a number of bytes or imix", f)
			}
			if n < MinFrame || n > MaxFrame {
				return nil, fmt.Errorf("frame size %d: want %d to %d bytes", n, MinFrame, MaxFrame)
			}
			out = append(out, Single(n))
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("frame sizes %q: none given", s)
	}
	return out, nil
}
