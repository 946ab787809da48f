package gateway

import "fmt"

// Reason says why a packet that reached the gateway did not come out, when
// no SA can be blamed (packets dropped on an SA count there, under an
// esp.Reason).
type Reason uint8

const (
	NoPolicy      Reason = iota // no SPD entry matches an outbound packet
	PolicyDiscard               // the matching SPD entry says discard
	Bypass                      // the matching SPD entry says bypass: a TUN gateway has no clear path
	NoSA                        // the SPD names an SA the gateway does not have
	NotIP                       // a TUN packet that is not IPv4 or IPv6
	TooBig                      // an inner packet larger than the tunnel MTU (ICMP sent back)
	UnknownSPI                  // an ESP packet whose SPI has no inbound SA for its destination
	WrongEncap                  // an ESP packet whose SA is of the other encapsulation (raw ESP against UDP)
	WrongSource                 // an ESP packet whose SA expects another outer source address or port
	Runt                        // an outer packet too short to carry an SPI
	TunWrite                    // the TUN device refused a write
	TunRead                     // a TUN read failed after the batch's first: what it held is lost
	SendError                   // the outer socket refused a send
	ECNDrop                     // outer CE over an inner Not-ECT packet: RFC 6040 §4.2 drops it
	NoSocket                    // sealed for an outer socket a change closed while the packet was in flight
	Acquire                     // no policy yet: the packet matched a trap (start_action: trap) and started IKE
	NumReasons
)

var reasonNames = [NumReasons]string{
	NoPolicy:      "no-policy",
	PolicyDiscard: "policy-discard",
	Bypass:        "bypass",
	NoSA:          "no-sa",
	NotIP:         "not-ip",
	TooBig:        "too-big",
	UnknownSPI:    "unknown-spi",
	WrongEncap:    "wrong-encap",
	WrongSource:   "wrong-source",
	Runt:          "runt",
	TunWrite:      "tun-write",
	TunRead:       "tun-read",
	SendError:     "send-error",
	ECNDrop:       "ecn-ce-not-ect",
	NoSocket:      "no-socket",
	Acquire:       "acquire",
}

func (r Reason) String() string {
	if r < NumReasons {
		return reasonNames[r]
	}
	return fmt.Sprintf("reason(%d)", uint8(r))
}
