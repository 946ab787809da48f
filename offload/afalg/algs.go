package afalg

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/espgw/espgw/offload/afalg/internal/kcapi"
	"github.com/espgw/espgw/sa"
)

// cipherAlg is the kernel's name for an ESP cipher as the kernel's own ESP
// asks for it (net/xfrm/xfrm_algo.c), without the IV generator.
func cipherAlg(c sa.Cipher) string {
	switch c {
	case sa.CipherAESCBC:
		return "cbc(aes)"
	case sa.Cipher3DES:
		return "cbc(des3_ede)"
	case sa.CipherAESCTR:
		return "rfc3686(ctr(aes))"
	case sa.CipherAESGCM16, sa.CipherAESGCM12, sa.CipherAESGCM8:
		return "rfc4106(gcm(aes))"
	case sa.CipherChaCha20Poly1305:
		return "rfc7539esp(chacha20,poly1305)"
	case sa.CipherAESGMAC:
		return "rfc4543(gcm(aes))"
	case sa.CipherAESCCM8, sa.CipherAESCCM12, sa.CipherAESCCM16:
		return "rfc4309(ccm(aes))"
	}
	return "ecb(cipher_null)"
}

// hashAlg is the kernel's name for the hash under an ESP HMAC.
func hashAlg(a sa.Auth) string {
	switch a {
	case sa.AuthHMACSHA1_96:
		return "sha1"
	case sa.AuthHMACSHA256_128:
		return "sha256"
	case sa.AuthHMACSHA384_192:
		return "sha384"
	case sa.AuthHMACSHA512_256:
		return "sha512"
	case sa.AuthHMACMD5_96:
		return "md5"
	}
	return ""
}

// plan is how one session is put to the kernel.
type plan struct {
	kind string // kcapi.AEAD or kcapi.SKCipher
	alg  string // the algorithm's name, e.g. authencesn(hmac(sha256),cbc(aes))
	bind string // what the socket binds to: alg, or driver names
}

// aeadAlg names the AEAD of an ESP suite: authenc (authencesn with ESN)
// over the HMAC and the cipher, or the AEAD's own template (rfc4106,
// rfc4543, rfc4309, rfc7539esp), which takes the ESN as it comes.
func aeadAlg(s sa.Suite, esn bool, hmac, cipher string) string {
	if s.Cipher.IsAEAD() {
		return cipher
	}
	t := "authenc"
	if esn {
		t = "authencesn"
	}
	return t + "(" + hmac + "," + cipher + ")"
}

// planFor names what a session binds to. With no driver the kernel picks
// its highest-priority implementation of the algorithm's name. A driver
// binds that driver for the cipher; inside a template the kernel finds an
// instance only by its full driver name, so the HMAC is named by the
// driver the kernel would pick for its hash (hmac(sha1-generic)).
func planFor(s sa.Suite, esn, cipherOnly bool, driver string, algs kcapi.Algs) (plan, error) {
	cipher := cipherAlg(s.Cipher)
	p := plan{kind: kcapi.AEAD}
	if cipherOnly {
		p.kind = kcapi.SKCipher
		p.alg = cipher
	} else {
		hmac := ""
		if !s.Cipher.IsAEAD() {
			hmac = "hmac(" + hashAlg(s.Auth) + ")"
		}
		p.alg = aeadAlg(s, esn, hmac, cipher)
	}
	if driver == "" {
		p.bind = p.alg
		return p, nil
	}
	d, ok := algs.ByDriver(driver)
	if !ok {
		return plan{}, fmt.Errorf("/proc/crypto lists no driver %q (%s is offered by: %s)", driver, cipher, offering(algs, cipher))
	}
	if d.Name == p.alg { // a whole AEAD (or the very cipher) by its driver name
		p.bind = driver
		return p, nil
	}
	cipherDrv := ""
	switch {
	case d.Name == cipher:
		cipherDrv = driver
	case cipher == "rfc3686(ctr(aes))" && d.Name == "ctr(aes)":
		cipherDrv = "rfc3686(" + driver + ")"
	case cipher == "rfc4106(gcm(aes))" && d.Name == "gcm(aes)":
		cipherDrv = "rfc4106(" + driver + ")"
	case cipher == "rfc4543(gcm(aes))" && d.Name == "gcm(aes)":
		cipherDrv = "rfc4543(" + driver + ")"
	case cipher == "rfc4309(ccm(aes))" && d.Name == "ccm(aes)":
		cipherDrv = "rfc4309(" + driver + ")"
	default:
		return plan{}, fmt.Errorf("driver %s cannot do %s: /proc/crypto lists it as %s (%s, module %s), and %s needs %s (as %s); /proc/crypto offers for it: %s",
			driver, s, d.Name, d.Type, d.Module, s, cipher, p.alg, offering(algs, cipher))
	}
	if cipherOnly || s.Cipher.IsAEAD() {
		p.bind = cipherDrv
		return p, nil
	}
	hash := hashAlg(s.Auth)
	h, ok := algs.Best(hash)
	if !ok {
		return plan{}, fmt.Errorf("%s with driver %s needs a %s driver, and /proc/crypto lists none (load its module, e.g. %s_generic)", s, driver, hash, hash)
	}
	p.bind = aeadAlg(s, esn, "hmac("+h.Driver+")", cipherDrv)
	return p, nil
}

// offering says which drivers /proc/crypto lists for an algorithm; a
// template instance nobody has asked for yet is not listed, so the drivers
// of its innermost algorithm are named too.
func offering(algs kcapi.Algs, name string) string {
	out := algs.Offering(name)
	if inner := innermost(name); inner != name {
		for _, o := range algs.Offering(inner) {
			out = append(out, inner+": "+o)
		}
	}
	if len(out) == 0 {
		return "nothing"
	}
	return strings.Join(out, "; ")
}

// innermost is the algorithm at the bottom of a template name:
// rfc3686(ctr(aes)) → aes.
func innermost(name string) string {
	for {
		i := strings.IndexByte(name, '(')
		if i < 0 || !strings.HasSuffix(name, ")") {
			return name
		}
		name = name[i+1 : len(name)-1]
		if j := strings.LastIndexByte(name, ','); j >= 0 && !strings.Contains(name[j:], ")") {
			name = name[j+1:]
		}
	}
}

// leaves splits a driver name into the drivers it is built from:
// authenc(hmac(sha1-generic),cbc(aes-generic)) → sha1-generic, aes-generic;
// a driver with no template around it is its own leaf.
func leaves(driver string) []string {
	var out []string
	word := 0 // start of the current word
	for i := 0; i <= len(driver); i++ {
		if i < len(driver) && !strings.ContainsRune("(),", rune(driver[i])) {
			continue
		}
		if i > word && (i == len(driver) || driver[i] != '(') {
			out = append(out, driver[word:i])
		}
		word = i + 1
	}
	return out
}

// describe says which modules do the work of a bound driver, from its
// leaves' /proc/crypto entries.
func describe(driver string, algs kcapi.Algs) string {
	var parts []string
	for _, l := range leaves(driver) {
		if a, ok := algs.ByDriver(l); ok {
			parts = append(parts, l+": "+a.Module)
		} else {
			parts = append(parts, l+": ?")
		}
	}
	return strings.Join(parts, ", ")
}

// kernelNote is what a user of afalg must know about the running kernel:
// from Linux 7.2 on AF_ALG reaches only implementations that run on the
// CPU, so no card is measured through it.
func kernelNote(release string) string {
	major, minor, ok := kernelVersion(release)
	if !ok || major < 7 || (major == 7 && minor < 2) {
		return ""
	}
	return fmt.Sprintf("Linux %s (7.2 or later) hides off-CPU crypto drivers from AF_ALG: hardware (QAT, CCP, CAAM, virtio-crypto) cannot be reached through afalg on this kernel, only CPU implementations", release)
}

func kernelVersion(release string) (major, minor int, ok bool) {
	f := strings.FieldsFunc(release, func(r rune) bool { return r == '.' || r == '-' || r == '+' })
	if len(f) < 2 {
		return 0, 0, false
	}
	major, err1 := strconv.Atoi(f[0])
	minor, err2 := strconv.Atoi(f[1])
	return major, minor, err1 == nil && err2 == nil
}
