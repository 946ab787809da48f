package ike

import (
	"crypto/x509/pkix"
	"encoding/asn1"
	"fmt"
	"strings"
)

// dnAttrs are the attribute names a DN is written with, as strongSwan
// writes them.
var dnAttrs = []struct {
	name string
	oid  asn1.ObjectIdentifier
}{
	{"C", asn1.ObjectIdentifier{2, 5, 4, 6}},
	{"ST", asn1.ObjectIdentifier{2, 5, 4, 8}},
	{"L", asn1.ObjectIdentifier{2, 5, 4, 7}},
	{"O", asn1.ObjectIdentifier{2, 5, 4, 10}},
	{"OU", asn1.ObjectIdentifier{2, 5, 4, 11}},
	{"CN", asn1.ObjectIdentifier{2, 5, 4, 3}},
	{"SN", asn1.ObjectIdentifier{2, 5, 4, 4}},
	{"serialNumber", asn1.ObjectIdentifier{2, 5, 4, 5}},
	{"T", asn1.ObjectIdentifier{2, 5, 4, 12}},
	{"G", asn1.ObjectIdentifier{2, 5, 4, 42}},
	{"E", asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 9, 1}},
	{"DC", asn1.ObjectIdentifier{0, 9, 2342, 19200300, 100, 1, 25}},
	{"UID", asn1.ObjectIdentifier{0, 9, 2342, 19200300, 100, 1, 1}},
}

// dnAliases are other names strongSwan and OpenSSL accept.
var dnAliases = map[string]string{"S": "ST", "emailAddress": "E", "title": "T", "givenName": "G", "uid": "UID"}

// parseDN encodes a distinguished name written as "C=CH, O=Example,
// CN=gw1" (RDNs in the order of the encoding; "\," escapes a comma) in
// DER.
func parseDN(s string) ([]byte, error) {
	var parts []string
	var cur strings.Builder
	for i := 0; i < len(s); i++ {
		switch {
		case s[i] == '\\' && i+1 < len(s):
			i++
			cur.WriteByte(s[i])
		case s[i] == ',':
			parts = append(parts, cur.String())
			cur.Reset()
		default:
			cur.WriteByte(s[i])
		}
	}
	parts = append(parts, cur.String())
	var seq pkix.RDNSequence
	for _, p := range parts {
		name, value, ok := strings.Cut(strings.TrimSpace(p), "=")
		name, value = strings.TrimSpace(name), strings.TrimSpace(value)
		if !ok || name == "" || value == "" {
			return nil, fmt.Errorf("DN %q: %q is not NAME=VALUE", s, strings.TrimSpace(p))
		}
		if a, ok := dnAliases[name]; ok {
			name = a
		}
		var oid asn1.ObjectIdentifier
		for _, a := range dnAttrs {
			if strings.EqualFold(a.name, name) {
				oid = a.oid
			}
		}
		if oid == nil {
			return nil, fmt.Errorf("DN %q: unknown attribute %q", s, name)
		}
		seq = append(seq, pkix.RelativeDistinguishedNameSET{{Type: oid, Value: value}})
	}
	b, err := asn1.Marshal(seq)
	if err != nil {
		return nil, fmt.Errorf("DN %q: %w", s, err)
	}
	return b, nil
}

// dnString writes a DER DN as text, its RDNs in order; one that does not
// decode is shown in hex.
func dnString(der []byte) string {
	var seq pkix.RDNSequence
	if rest, err := asn1.Unmarshal(der, &seq); err != nil || len(rest) != 0 {
		return fmt.Sprintf("%x", der)
	}
	var parts []string
	for _, rdn := range seq {
		for _, atv := range rdn {
			name := atv.Type.String()
			for _, a := range dnAttrs {
				if a.oid.Equal(atv.Type) {
					name = a.name
				}
			}
			parts = append(parts, fmt.Sprintf("%s=%v", name, atv.Value))
		}
	}
	return strings.Join(parts, ", ")
}

// dnEqual compares two DER DNs attribute by attribute, string values
// without regard to case or ASN.1 string type.
func dnEqual(a, b []byte) bool {
	var x, y pkix.RDNSequence
	if r, err := asn1.Unmarshal(a, &x); err != nil || len(r) != 0 {
		return false
	}
	if r, err := asn1.Unmarshal(b, &y); err != nil || len(r) != 0 {
		return false
	}
	if len(x) != len(y) {
		return false
	}
	for i := range x {
		if len(x[i]) != len(y[i]) {
			return false
		}
		for j := range x[i] {
			p, q := x[i][j], y[i][j]
			ps, ok1 := p.Value.(string)
			qs, ok2 := q.Value.(string)
			if !p.Type.Equal(q.Type) || !ok1 || !ok2 || !strings.EqualFold(ps, qs) {
				return false
			}
		}
	}
	return true
}
