package testbed

import (
	"github.com/espgw/espgw/sa"
)

// EspSALine is an SA as a line of Wireshark's esp_sa table (the value of
// tshark's -o uat:esp_sa: option), or "" for a suite Wireshark cannot name.
// It holds the keys in clear.
func EspSALine(s *sa.SA) string {
	line, err := sa.EspSALine(s)
	if err != nil {
		return ""
	}
	return line
}
