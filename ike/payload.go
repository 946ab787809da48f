package ike

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net/netip"
	"strings"
)

// Payload is one payload of a message.
type Payload interface {
	Type() PayloadType
	// appendBody appends the payload's body, after the generic header.
	appendBody(b []byte) []byte
}

// Bounds on what one payload may hold.
const (
	minNonceLen  = 16
	maxNonceLen  = 256
	maxKELen     = 1024 // MODP 8192 is 1024 bytes
	maxIDLen     = 1024
	maxAuthLen   = 2048 // an RSA-8192 signature and its algorithm
	maxNotifyLen = 2048
	maxDeletes   = 256
)

func decodePayload(t PayloadType, critical bool, body []byte) (Payload, error) {
	switch t {
	case PayloadSA:
		return parseSA(body)
	case PayloadKE:
		return parseKE(body)
	case PayloadNonce:
		if len(body) < minNonceLen || len(body) > maxNonceLen {
			return nil, fmt.Errorf("nonce of %d bytes, want %d to %d", len(body), minNonceLen, maxNonceLen)
		}
		return &Nonce{Data: clone(body)}, nil
	case PayloadIDi, PayloadIDr:
		return parseID(t, body)
	case PayloadAuth:
		return parseAuth(body)
	case PayloadNotify:
		return parseNotify(body)
	case PayloadDelete:
		return parseDelete(body)
	case PayloadTSi, PayloadTSr:
		return parseTS(t, body)
	case PayloadCert:
		return parseCert(body)
	case PayloadCertReq:
		return parseCertReq(body)
	}
	if len(body) > MaxMessageLen {
		return nil, fmt.Errorf("%d bytes", len(body))
	}
	return &Unknown{Kind: t, Critical: critical, Body: clone(body)}, nil
}

func clone(b []byte) []byte { return append([]byte(nil), b...) }

// Unknown is a payload this package does not read (VendorID, CP,
// EAP, ...). Critical is the sender's critical bit.
type Unknown struct {
	Kind     PayloadType
	Critical bool
	Body     []byte
}

func (u *Unknown) Type() PayloadType          { return u.Kind }
func (u *Unknown) appendBody(b []byte) []byte { return append(b, u.Body...) }

// KE is a Key Exchange payload (RFC 7296 §3.4).
type KE struct {
	Group DHGroup
	Data  []byte
}

func (*KE) Type() PayloadType { return PayloadKE }
func (k *KE) appendBody(b []byte) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(k.Group))
	return append(append(b, 0, 0), k.Data...)
}

func parseKE(body []byte) (*KE, error) {
	if len(body) < 4 {
		return nil, fmt.Errorf("%d bytes, want at least 4", len(body))
	}
	if len(body)-4 > maxKELen {
		return nil, fmt.Errorf("key exchange data of %d bytes, more than %d", len(body)-4, maxKELen)
	}
	return &KE{Group: DHGroup(binary.BigEndian.Uint16(body)), Data: clone(body[4:])}, nil
}

// Nonce is a Nonce payload (RFC 7296 §3.9).
type Nonce struct{ Data []byte }

func (*Nonce) Type() PayloadType            { return PayloadNonce }
func (n *Nonce) appendBody(b []byte) []byte { return append(b, n.Data...) }

// IDType is an identification type (RFC 7296 §3.5).
type IDType uint8

// The identification types.
const (
	IDIPv4  IDType = 1
	IDFQDN  IDType = 2
	IDEmail IDType = 3
	IDIPv6  IDType = 5
	IDDN    IDType = 9
	IDKeyID IDType = 11
)

var idTypeNames = map[IDType]string{IDIPv4: "ipv4", IDFQDN: "fqdn", IDEmail: "email", IDIPv6: "ipv6", IDDN: "dn", IDKeyID: "keyid"}

func (t IDType) String() string { return nameOf(idTypeNames, t, "id-type") }

// Identity is an IKE identity: a type and its data.
type Identity struct {
	Kind IDType
	Data []byte
}

// FQDN, Email, KeyID and Addr make identities.
func FQDN(name string) Identity  { return Identity{IDFQDN, []byte(name)} }
func Email(addr string) Identity { return Identity{IDEmail, []byte(addr)} }
func KeyID(id []byte) Identity   { return Identity{IDKeyID, clone(id)} }
func Addr(a netip.Addr) Identity {
	if a.Is4() {
		b := a.As4()
		return Identity{IDIPv4, b[:]}
	}
	b := a.As16()
	return Identity{IDIPv6, b[:]}
}

// DN is a distinguished name identity from its DER encoding (a
// certificate's RawSubject).
func DN(der []byte) Identity { return Identity{IDDN, clone(der)} }

// Equal reports whether two identities are the same type and data; DNs
// are compared attribute by attribute (dnEqual).
func (id Identity) Equal(o Identity) bool {
	if id.Kind == IDDN && o.Kind == IDDN {
		return dnEqual(id.Data, o.Data)
	}
	return id.Kind == o.Kind && string(id.Data) == string(o.Data)
}

func (id Identity) String() string {
	switch id.Kind {
	case IDDN:
		return fmt.Sprintf("%s:%q", id.Kind, dnString(id.Data))
	case IDFQDN, IDEmail:
		return fmt.Sprintf("%s:%q", id.Kind, id.Data)
	case IDIPv4, IDIPv6:
		if a, ok := netip.AddrFromSlice(id.Data); ok {
			return fmt.Sprintf("%s:%s", id.Kind, a)
		}
	}
	return fmt.Sprintf("%s:%x", id.Kind, id.Data)
}

// ID is an IDi or IDr payload.
type ID struct {
	Kind PayloadType // PayloadIDi or PayloadIDr
	Identity
}

func (i *ID) Type() PayloadType { return i.Kind }
func (i *ID) appendBody(b []byte) []byte {
	return append(append(b, byte(i.Identity.Kind), 0, 0, 0), i.Data...)
}

func parseID(t PayloadType, body []byte) (*ID, error) {
	if len(body) < 5 {
		return nil, fmt.Errorf("%d bytes, want at least 5", len(body))
	}
	if len(body)-4 > maxIDLen {
		return nil, fmt.Errorf("identity of %d bytes, more than %d", len(body)-4, maxIDLen)
	}
	id := &ID{Kind: t, Identity: Identity{Kind: IDType(body[0]), Data: clone(body[4:])}}
	switch {
	case id.Identity.Kind == IDIPv4 && len(id.Data) != 4, id.Identity.Kind == IDIPv6 && len(id.Data) != 16:
		return nil, fmt.Errorf("%s identity of %d bytes", id.Identity.Kind, len(id.Data))
	}
	return id, nil
}

// AuthMethod is an authentication method (RFC 7296 §3.8).
type AuthMethod uint8

// The authentication methods.
const (
	AuthRSASig    AuthMethod = 1
	AuthSharedKey AuthMethod = 2
	AuthDSSSig    AuthMethod = 3
	AuthDigSig    AuthMethod = 14
)

// Auth is an AUTH payload.
type Auth struct {
	Method AuthMethod
	Data   []byte
}

func (*Auth) Type() PayloadType { return PayloadAuth }
func (a *Auth) appendBody(b []byte) []byte {
	return append(append(b, byte(a.Method), 0, 0, 0), a.Data...)
}

func parseAuth(body []byte) (*Auth, error) {
	if len(body) < 5 || len(body)-4 > maxAuthLen {
		return nil, fmt.Errorf("%d bytes, want 5 to %d", len(body), maxAuthLen+4)
	}
	return &Auth{Method: AuthMethod(body[0]), Data: clone(body[4:])}, nil
}

// Notify is a Notify payload (RFC 7296 §3.10).
type Notify struct {
	Protocol ProtocolID // 0 when no SPI
	SPI      []byte
	Kind     NotifyType
	Data     []byte
}

func (*Notify) Type() PayloadType { return PayloadNotify }
func (n *Notify) appendBody(b []byte) []byte {
	b = append(b, byte(n.Protocol), byte(len(n.SPI)))
	b = binary.BigEndian.AppendUint16(b, uint16(n.Kind))
	return append(append(b, n.SPI...), n.Data...)
}

func (n *Notify) String() string { return n.Kind.String() }

func parseNotify(body []byte) (*Notify, error) {
	if len(body) < 4 {
		return nil, fmt.Errorf("%d bytes, want at least 4", len(body))
	}
	spiLen := int(body[1])
	if spiLen != 0 && spiLen != 4 && spiLen != 8 {
		return nil, fmt.Errorf("SPI size %d, want 0, 4 or 8", spiLen)
	}
	if len(body) < 4+spiLen {
		return nil, fmt.Errorf("%d bytes, shorter than its %d-byte SPI", len(body), spiLen)
	}
	if len(body)-4-spiLen > maxNotifyLen {
		return nil, fmt.Errorf("notification data of %d bytes, more than %d", len(body)-4-spiLen, maxNotifyLen)
	}
	return &Notify{Protocol: ProtocolID(body[0]), Kind: NotifyType(binary.BigEndian.Uint16(body[2:])),
		SPI: clone(body[4 : 4+spiLen]), Data: clone(body[4+spiLen:])}, nil
}

// Delete is a Delete payload (RFC 7296 §3.11): the IKE SA itself
// (Protocol IKE, no SPIs) or CHILD_SAs by their inbound SPIs as the sender
// sees them.
type Delete struct {
	Protocol ProtocolID
	SPIs     []uint32
}

func (*Delete) Type() PayloadType { return PayloadDelete }
func (d *Delete) appendBody(b []byte) []byte {
	spiLen := byte(4)
	if d.Protocol == ProtoIKE {
		spiLen = 0
	}
	b = append(b, byte(d.Protocol), spiLen)
	b = binary.BigEndian.AppendUint16(b, uint16(len(d.SPIs)))
	for _, s := range d.SPIs {
		b = binary.BigEndian.AppendUint32(b, s)
	}
	return b
}

func parseDelete(body []byte) (*Delete, error) {
	if len(body) < 4 {
		return nil, fmt.Errorf("%d bytes, want at least 4", len(body))
	}
	d := &Delete{Protocol: ProtocolID(body[0])}
	spiLen, n := int(body[1]), int(binary.BigEndian.Uint16(body[2:]))
	switch {
	case d.Protocol == ProtoIKE && (spiLen != 0 || n != 0 || len(body) != 4):
		return nil, fmt.Errorf("IKE deletion with %d SPIs of %d bytes (%d bytes), want none", n, spiLen, len(body))
	case d.Protocol == ProtoIKE:
		return d, nil
	case d.Protocol != ProtoESP && d.Protocol != ProtoAH:
		return nil, fmt.Errorf("deletion for %s", d.Protocol)
	case spiLen != 4:
		return nil, fmt.Errorf("%s deletion with %d-byte SPIs, want 4", d.Protocol, spiLen)
	case n > maxDeletes:
		return nil, fmt.Errorf("%d SPIs, more than %d", n, maxDeletes)
	case len(body) != 4+4*n:
		return nil, fmt.Errorf("%d SPIs in %d bytes", n, len(body))
	}
	for i := range n {
		d.SPIs = append(d.SPIs, binary.BigEndian.Uint32(body[4+4*i:]))
	}
	return d, nil
}

// ParseIdentity reads an identity written as in strongSwan's
// configuration: "@host.example" an FQDN, "@#0a1b…" a key id in hex, an
// IPv4 or IPv6 address, "C=CH, O=Example, CN=gw1" a distinguished name,
// "user@host" an email address, anything else an FQDN.
func ParseIdentity(s string) (Identity, error) {
	switch {
	case s == "" || s == "@" || s == "@#":
		return Identity{}, fmt.Errorf("empty identity %q", s)
	case strings.HasPrefix(s, "@#"):
		b, err := hex.DecodeString(s[2:])
		if err != nil {
			return Identity{}, fmt.Errorf("key id %q: not hexadecimal", s)
		}
		return KeyID(b), nil
	case strings.HasPrefix(s, "@"):
		return FQDN(s[1:]), nil
	}
	if a, err := netip.ParseAddr(s); err == nil {
		return Addr(a.Unmap()), nil
	}
	if strings.Contains(s, "=") {
		der, err := parseDN(s)
		if err != nil {
			return Identity{}, err
		}
		return Identity{IDDN, der}, nil
	}
	if strings.Contains(s, "@") {
		return Email(s), nil
	}
	return FQDN(s), nil
}
