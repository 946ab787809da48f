package esp

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Reason says why a packet did not come out. Every dropped packet is counted
// under exactly one Reason. A Reason is also an error.
type Reason uint8

const (
	// OK is no drop.
	OK             Reason = iota
	BadICV                // the ICV did not verify
	Replay                // a sequence number seen before, inside the window
	OutsideWindow         // a sequence number older than the window
	UnknownSPI            // no SA for the SPI
	Truncated             // too short for the suite, or not a whole number of blocks
	BadPadding            // the padding bytes are not 1, 2, 3, …, or the pad length overruns
	BadNextHeader         // a next header the mode cannot carry, or an inner packet that does not parse
	Expired               // the SA passed a hard lifetime
	Dummy                 // next header 59: a dummy packet (RFC 4303 §2.6), dropped by design
	SeqExhausted          // the sequence number space ran out (RFC 4303 §3.3.3)
	Policy                // the inner packet is outside the SA's selectors
	NoRoom                // the buffer has no headroom or tailroom for the ESP framing
	EngineFailure         // the offload engine could not run the op
	SeqUnpersisted        // the sequence number is above the last bound the state directory could record (full disk)
	NumReasons            // the number of reasons, for counter arrays
)

var reasonNames = [NumReasons]string{
	OK:             "ok",
	BadICV:         "bad-icv",
	Replay:         "replay",
	OutsideWindow:  "outside-window",
	UnknownSPI:     "unknown-spi",
	Truncated:      "truncated",
	BadPadding:     "bad-padding",
	BadNextHeader:  "bad-next-header",
	Expired:        "sa-expired",
	Dummy:          "dummy",
	SeqExhausted:   "seq-exhausted",
	Policy:         "policy",
	NoRoom:         "no-room",
	EngineFailure:  "engine-failure",
	SeqUnpersisted: "seq-unpersisted",
}

// String is the reason's name as counters and reports show it.
func (r Reason) String() string {
	if r < NumReasons {
		return reasonNames[r]
	}
	return fmt.Sprintf("reason(%d)", uint8(r))
}

// Error makes a Reason usable as an error.
func (r Reason) Error() string { return "esp: " + r.String() }

// FormatCounts writes counts by reason (an SA's or a gateway's drops, a
// capture's rejects) as "reason=N …" in the reasons' name order, or "none",
// the one form every report of espgw prints them in.
func FormatCounts(m map[string]uint64) string {
	if len(m) == 0 {
		return "none"
	}
	parts := make([]string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
	}
	return strings.Join(parts, " ")
}
