package tun

// Packet returns the outer packet length for an inner packet of innerLen
// bytes with minimal padding.
func (o Overhead) Packet(innerLen int) int {
	a := o.align()
	payload := (innerLen + espTrailer + a - 1) / a * a
	return o.OuterIP + o.UDP + o.ESPHeader + o.IV + payload + o.ICV
}
