// Package header reads and writes IPv4, IPv6 and ICMP headers and computes
// Internet checksums (RFC 1071, with RFC 1624's incremental update).
//
// It is the one place the data path (ESP framing, the transport's and
// AF_XDP's outer headers, ICMP errors, RFC 6040's ECN rewrite) and the
// lab's packet editors (impairments, the WAN relay, the capture reader and
// rewriter) parse, write and sum headers, so that they all agree with each
// other and with a real stack. Nothing in it allocates.
package header
