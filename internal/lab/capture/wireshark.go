package capture

import (
	"github.com/espgw/espgw/sa"
)

// WiresharkSA returns the SA as a line of Wireshark's esp_sa table: the
// content of the esp_sa file in a Wireshark profile, or the value of
// tshark's -o uat:esp_sa:… option (sa.EspSALine). The line holds the keys
// in clear: it is written only where the user asks for it.
func WiresharkSA(s *sa.SA) (string, error) { return sa.EspSALine(s) }

// WiresharkSAFile returns the esp_sa lines for every SA, one per line.
func WiresharkSAFile(sas []*sa.SA) ([]byte, error) {
	return sa.MarshalEspSA(&sa.Config{SAs: sas})
}
