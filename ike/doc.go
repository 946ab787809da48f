// Package ike speaks IKEv2 (RFC 7296) with a pre-shared key or X.509
// certificates.
//
// It has the message and payload codec, the transforms and proposals (with
// strongSwan's proposal syntax), the key derivation, and an initiator and
// responder (Endpoint) that negotiate an IKE SA and its CHILD_SAs, whose
// keys become espgw sa.SA pairs (Child.SAs). It uses the standard library
// and golang.org/x/crypto alone, and nothing of the lab.
//
// # What it has
//
//   - Messages: the header and the payloads SA (proposals, transforms, the
//     Key Length attribute), KE, Nonce, IDi/IDr, AUTH, TSi/TSr, Notify,
//     Delete, CERT, CERTREQ, SK and SKF; other payloads are kept as
//     Unknown (a critical one is answered with
//     UNSUPPORTED_CRITICAL_PAYLOAD). Every decoder is bounded
//     (message, payload, proposal, transform and selector counts and
//     lengths) and returns an error naming the payload and its offset.
//   - Transforms: ENCR AES-CBC and AES-GCM-16 (128, 192, 256 bits) and
//     ChaCha20-Poly1305 (RFC 7634); PRF HMAC-SHA1, SHA2-256/384/512; INTEG HMAC-SHA1-96, SHA2-256-128,
//     SHA2-384-192, SHA2-512-256; groups MODP 2048 and 3072, ECP 256 and
//     384, Curve25519; ESN negotiation for ESP. ESP proposals map to
//     espgw's suites; ParseProposals refuses what espgw cannot carry.
//   - Keys: SKEYSEED, SK_d/ai/ar/ei/er/pi/pr, the CHILD_SA's KEYMAT (with
//     a PFS g^ir on rekey), the rekeyed IKE SA's SKEYSEED from the old SK_d.
//   - Exchanges: IKE_SA_INIT with NAT detection (and the float to port
//     4500), INVALID_KE_PAYLOAD retry, COOKIE above CookieThreshold
//     half-open SAs and silence above MaxHalfOpen; IKE_AUTH with a PSK or
//     certificates (chain validation against Config.CAs; RFC 7427
//     Digital Signatures announced with SIGNATURE_HASH_ALGORITHMS, or
//     the classic RSA and ECDSA methods), identities FQDN, email,
//     IPv4/IPv6, DN or key id (checked against the certificate), traffic
//     selector narrowing and the first CHILD_SA; CREATE_CHILD_SA for a CHILD_SA
//     rekey (REKEY_SA, optional PFS), a new CHILD_SA or an IKE SA rekey
//     (the CHILD_SAs move to the new SA), both ways;
//     INFORMATIONAL liveness checks and Delete of the IKE SA or CHILD_SAs.
//     Message IDs with a window of one, retransmission with a doubling
//     timeout, duplicate requests answered with the response already sent.
//     IKE fragmentation (RFC 7383): IKEV2_FRAGMENTATION_SUPPORTED both
//     ways, encrypted messages above Config.FragmentSize sent as SKF
//     fragments, each fragment verified on arrival and the message
//     reassembled within bounds (MaxFragments, MaxMessageLen, 30 s); a
//     retransmitted first fragment gets the whole response again.
//     Simultaneous rekeys (RFC 7296 §2.8.1): when both sides rekey one
//     CHILD_SA or the IKE SA at once, the new SA of the exchange with the
//     lowest nonce is deleted by its initiator and the old one by the
//     other's, the CHILD_SAs moving to the surviving IKE SA
//     (Config.OnRedundant hears of this side's redundant CHILD_SA before
//     its Delete); a rekey the peer's came before is refused
//     (ErrRekeyed). Several CHILD_SAs per connection: Config.ChildName and
//     MoreChildren, IKESA.NewChild, Child.Name; a responder gives a
//     request the first child whose selectors it fits. Transport mode
//     (USE_TRANSPORT_MODE), host to host, also through a NAT (RFC 7296
//     §2.23.1: the SAs carry the IKE SA's addresses, whatever one address
//     a side named).
//   - Transport: the sockets of ports 500 and 4500 (non-ESP marker).
//     Every message that leads nowhere is counted by reason
//     (Endpoint.Counts).
//
// # What it does not have yet
//
// CRL and OCSP checks, EAP, configuration payloads and MOBIKE. A peer behind a NAT whose authenticated request comes
// from a new address or port is followed there (RFC 7296 §2.23), its
// CHILD_SAs too (Config.OnPeerMoved); so is one whose ESP comes from a new
// port, when the gateway tells (IKESA.FollowPeerPort). NAT-T keepalives
// are the gateway's ESP-in-UDP socket's. Lifetimes, rekey and DPD timers are the gateway's:
// its IKE daemon (internal/gateway) drives an Endpoint per connection, and
// Config.OnChild, OnRekey and OnRedundant put the CHILD_SAs in force and
// out.
// `espgw ike initiate` negotiates a CHILD_SA and writes it as an SA file.
package ike
