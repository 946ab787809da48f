// Package kcapi opens the Linux kernel's crypto API through AF_ALG sockets.
//
// It is the Linux kernel crypto API's door for user space, AF_ALG sockets
// (crypto/af_alg.c, algif_aead.c, algif_skcipher.c), driven with
// golang.org/x/sys/unix and no cgo, and the kernel's list of algorithms in
// /proc/crypto.
//
// A Transform is a socket bound to one algorithm (an "aead" or "skcipher"
// instance, by name or by driver name) that holds the key; each Op is an
// operation socket accepted from it. Kernels from 6.1.76 on take one request
// at a time per operation socket (a second is refused with EBUSY), so
// parallel work needs several Ops, each used by one goroutine at a time.
package kcapi

import (
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Kinds of AF_ALG sockets this package binds.
const (
	AEAD     = "aead"
	SKCipher = "skcipher"
)

// ErrNoAFALG is wrapped by every error that comes from a kernel without
// AF_ALG (socket(AF_ALG) refused).
var ErrNoAFALG = errors.New("this kernel has no AF_ALG")

// ErrBadMessage is an AEAD decryption whose tag did not verify (EBADMSG).
var ErrBadMessage = errors.New("authentication tag does not verify")

// Probe reports whether the running kernel offers AF_ALG sockets.
func Probe() error {
	fd, err := unix.Socket(unix.AF_ALG, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("%w (socket(AF_ALG): %v; it needs CONFIG_CRYPTO_USER_API_AEAD/SKCIPHER, or modprobe af_alg algif_aead algif_skcipher)", ErrNoAFALG, err)
	}
	unix.Close(fd)
	return nil
}

// Transform is a socket bound to one algorithm instance.
type Transform struct {
	fd   int
	kind string
	name string
}

// Bind creates an AF_ALG socket of kind (AEAD or SKCipher) bound to name,
// which may be an algorithm name such as "cbc(aes)" (the kernel picks its
// highest-priority driver) or driver names, such as
// "authenc(hmac(sha1-generic),virtio_crypto_aes_cbc)".
func Bind(kind, name string) (*Transform, error) {
	if err := Probe(); err != nil {
		return nil, err
	}
	fd, err := unix.Socket(unix.AF_ALG, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("socket(AF_ALG): %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrALG{Type: kind, Name: name}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("bind AF_ALG %s %q: %w", kind, name, err)
	}
	return &Transform{fd: fd, kind: kind, name: name}, nil
}

// Name is the name the transform was bound to.
func (t *Transform) Name() string { return t.name }

// Kind is AEAD or SKCipher.
func (t *Transform) Kind() string { return t.kind }

// SetKey sets the key of the transform (for authenc, the key blob of
// AuthencKey). It must come before Accept.
func (t *Transform) SetKey(key []byte) error {
	if err := unix.SetsockoptString(t.fd, unix.SOL_ALG, unix.ALG_SET_KEY, string(key)); err != nil {
		return fmt.Errorf("set %d-byte key of %s: %w", len(key), t.name, err)
	}
	return nil
}

// SetAuthSize sets an AEAD's tag length. AF_ALG takes it as the option
// length with no option value.
func (t *Transform) SetAuthSize(n int) error {
	_, _, e := unix.Syscall6(unix.SYS_SETSOCKOPT, uintptr(t.fd), unix.SOL_ALG, unix.ALG_SET_AEAD_AUTHSIZE, 0, uintptr(n), 0)
	if e != 0 {
		return fmt.Errorf("set the %d-byte tag of %s: %w", n, t.name, e)
	}
	return nil
}

// Accept opens an operation socket on the transform. unix.Accept cannot be
// used: AF_ALG has no peer address to return, so accept4 is called with a
// NULL address.
func (t *Transform) Accept(ivLen int) (*Op, error) {
	for {
		fd, _, e := unix.Syscall6(unix.SYS_ACCEPT4, uintptr(t.fd), 0, 0, unix.SOCK_CLOEXEC, 0, 0)
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			return nil, fmt.Errorf("accept an operation socket on %s: %w", t.name, e)
		}
		return newOp(int(fd), t.kind == AEAD, ivLen), nil
	}
}

// Close closes the bound socket; accepted Ops stay usable until closed.
func (t *Transform) Close() error { return unix.Close(t.fd) }

// AuthencKey lays out the key of an authenc or authencesn instance as
// crypto_authenc_extractkeys reads it: an rtattr {len 8, type 1
// (CRYPTO_AUTHENC_KEYA_PARAM)} in host order, the cipher key's length as a
// big-endian u32, then the authentication key and the cipher key.
func AuthencKey(authKey, encKey []byte) []byte {
	b := make([]byte, 8, 8+len(authKey)+len(encKey))
	*(*uint16)(unsafe.Pointer(&b[0])) = 8
	*(*uint16)(unsafe.Pointer(&b[2])) = 1
	n := uint32(len(encKey))
	b[4], b[5], b[6], b[7] = byte(n>>24), byte(n>>16), byte(n>>8), byte(n)
	b = append(b, authKey...)
	return append(b, encKey...)
}

// MaxVecs is the most buffers one side of a request may have.
const MaxVecs = 4

// Vec is a list of buffers, one side of a request, kept by the caller so
// that building it allocates nothing.
type Vec struct {
	bufs [MaxVecs][]byte
	n    int
}

// Reset empties v.
func (v *Vec) Reset() { v.n = 0 }

// Add appends b (empty buffers are skipped).
func (v *Vec) Add(b []byte) {
	if len(b) == 0 {
		return
	}
	v.bufs[v.n] = b
	v.n++
}

// Len is the total length of v's buffers.
func (v *Vec) Len() int {
	n := 0
	for _, b := range v.bufs[:v.n] {
		n += len(b)
	}
	return n
}

// Op is one operation socket. It is not safe for concurrent use: the
// kernel takes one request at a time on it.
type Op struct {
	fd    int
	aead  bool
	ivLen int
	msg   unix.Msghdr
	iov   [MaxVecs]unix.Iovec
	cmsg  []byte
	// offsets of the values in cmsg
	opOff, ivOff, assocOff int
}

func newOp(fd int, aead bool, ivLen int) *Op {
	o := &Op{fd: fd, aead: aead, ivLen: ivLen}
	size := unix.CmsgSpace(4)
	if ivLen > 0 {
		size += unix.CmsgSpace(4 + ivLen)
	}
	if aead {
		size += unix.CmsgSpace(4)
	}
	o.cmsg = make([]byte, size)
	off := 0
	put := func(typ int32, dataLen int) int {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&o.cmsg[off]))
		h.Level = unix.SOL_ALG
		h.Type = typ
		h.SetLen(unix.CmsgLen(dataLen))
		data := off + unix.CmsgLen(0)
		off += unix.CmsgSpace(dataLen)
		return data
	}
	o.opOff = put(unix.ALG_SET_OP, 4)
	if ivLen > 0 {
		o.ivOff = put(unix.ALG_SET_IV, 4+ivLen)
		*(*uint32)(unsafe.Pointer(&o.cmsg[o.ivOff])) = uint32(ivLen)
	}
	if aead {
		o.assocOff = put(unix.ALG_SET_AEAD_ASSOCLEN, 4)
	}
	return o
}

// Do runs one request: in is sent (for an AEAD: the associated data, then
// the plaintext, or the ciphertext and tag), out receives the result (the
// associated data copied, then the ciphertext and tag, or the plaintext).
// in and out may name the same memory: the kernel copies the input before
// it writes the output. It returns the bytes received; a tag that does not
// verify is ErrBadMessage.
//
// Do tells the Go scheduler about its system calls, so other goroutines
// run on the P while a request sleeps in the kernel (another socket's
// worker posting its own request). DoDirect does not, for a caller that
// has nothing to run meanwhile.
func (o *Op) Do(encrypt bool, iv []byte, assocLen int, in, out *Vec) (int, error) {
	return o.do(false, encrypt, iv, assocLen, in, out)
}

// DoDirect is Do with system calls the Go scheduler is not told of: the
// thread and its P wait in the kernel for the result as a C program's
// would. A blocking system call longer than one sysmon tick (20 µs) costs
// the runtime a hand-off — its P taken back, another thread woken, with
// GOMAXPROCS 1 one more to poll the network — and under QEMU that is a
// request's worth of time: measured in a one-vCPU guest, one context
// switch per request more than openssl on the kernel's software driver and
// three to four more on virtio-crypto, where DoDirect has about as many as
// openssl. The price: until the request returns, that P runs nothing else and a
// garbage collection waits for it, so a request that never returns stalls
// the process. Use it only where requests are known to be short.
func (o *Op) DoDirect(encrypt bool, iv []byte, assocLen int, in, out *Vec) (int, error) {
	return o.do(true, encrypt, iv, assocLen, in, out)
}

func (o *Op) do(direct, encrypt bool, iv []byte, assocLen int, in, out *Vec) (int, error) {
	op := uint32(unix.ALG_OP_DECRYPT)
	if encrypt {
		op = unix.ALG_OP_ENCRYPT
	}
	*(*uint32)(unsafe.Pointer(&o.cmsg[o.opOff])) = op
	if o.ivLen > 0 {
		if len(iv) != o.ivLen {
			return 0, fmt.Errorf("IV is %d bytes, the algorithm takes %d", len(iv), o.ivLen)
		}
		copy(o.cmsg[o.ivOff+4:], iv)
	}
	if o.aead {
		*(*uint32)(unsafe.Pointer(&o.cmsg[o.assocOff])) = uint32(assocLen)
	}
	want := in.Len()
	o.setIov(in)
	o.msg.Control = &o.cmsg[0]
	o.msg.SetControllen(len(o.cmsg))
	n, err := o.call(direct, unix.SYS_SENDMSG)
	o.msg.Control = nil
	o.msg.Controllen = 0
	if err != nil {
		o.clearIov()
		return 0, fmt.Errorf("sendmsg: %w", err)
	}
	if n != want {
		o.clearIov()
		return 0, fmt.Errorf("sendmsg took %d of %d bytes", n, want)
	}
	o.setIov(out)
	n, err = o.call(direct, unix.SYS_RECVMSG)
	o.clearIov()
	if err == unix.EBADMSG {
		return 0, ErrBadMessage
	}
	if err != nil {
		return 0, fmt.Errorf("recvmsg: %w", err)
	}
	return n, nil
}

func (o *Op) setIov(v *Vec) {
	for i, b := range v.bufs[:v.n] {
		o.iov[i].Base = &b[0]
		o.iov[i].SetLen(len(b))
	}
	o.msg.Iov = &o.iov[0]
	o.msg.SetIovlen(v.n)
}

// clearIov drops the references to the caller's buffers.
func (o *Op) clearIov() {
	for i := range o.iov {
		o.iov[i] = unix.Iovec{}
	}
	o.msg.Iov = nil
	o.msg.Iovlen = 0
}

func (o *Op) call(direct bool, trap uintptr) (int, error) {
	for {
		var n uintptr
		var e unix.Errno
		if direct {
			n, _, e = unix.RawSyscall(trap, uintptr(o.fd), uintptr(unsafe.Pointer(&o.msg)), 0)
		} else {
			n, _, e = unix.Syscall(trap, uintptr(o.fd), uintptr(unsafe.Pointer(&o.msg)), 0)
		}
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			return 0, e
		}
		return int(n), nil
	}
}

// Close closes the operation socket.
func (o *Op) Close() error { return unix.Close(o.fd) }
