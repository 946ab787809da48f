// Package ike speaks IKEv2 (RFC 7296): the message and payload codec, the
// transforms and proposals (with strongSwan's proposal syntax), the key
// derivation, and an initiator and responder that negotiate an IKE SA
// with a pre-shared key and its first CHILD_SA, whose keys become an
// espgw sa.SA pair.
//
// # What it has
//
//   - Messages: the header and the payloads SA (proposals, transforms, the
//     Key Length attribute), KE, Nonce, IDi/IDr, AUTH, TSi/TSr, Notify,
//     Delete and SK; other payloads are kept as Unknown. Every decoder is
//     bounded (message, payload, proposal, transform and selector counts
//     and lengths) and returns an error naming the payload and its offset.
//   - Transforms: ENCR AES-CBC and AES-GCM-16 (128, 192, 256 bits); PRF
//     HMAC-SHA1, SHA2-256/384/512; INTEG HMAC-SHA1-96, SHA2-256-128,
//     SHA2-384-192, SHA2-512-256; groups MODP 2048 and 3072, ECP 256 and
//     384, Curve25519; ESN negotiation for ESP.
//   - Keys: SKEYSEED, SK_d/ai/ar/ei/er/pi/pr, the CHILD_SA's KEYMAT, and the
//     rekeyed IKE SA's SKEYSEED.
package ike
