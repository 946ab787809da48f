package vcrypto

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/espgw/espgw/offload/virtio/internal/vfio"
)

// Cipher algorithms (virtio_crypto_cipher_session_para.algo).
type Cipher uint32

const (
	AESCBC  Cipher = 3
	AESCTR  Cipher = 4
	DES3CBC Cipher = 8
)

func (c Cipher) String() string {
	switch c {
	case AESCBC:
		return "aes-cbc"
	case AESCTR:
		return "aes-ctr"
	case DES3CBC:
		return "3des-cbc"
	}
	return fmt.Sprintf("cipher-%d", uint32(c))
}

// Op is a session's direction.
type Op uint32

const (
	Encrypt Op = 1
	Decrypt Op = 2
)

// Opcodes (VIRTIO_CRYPTO_OPCODE(service, op)) and statuses.
const (
	opCreateSession  = 0<<8 | 2
	opDestroySession = 0<<8 | 3
	opEncrypt        = 0 // service 0 (cipher), op 0
	opDecrypt        = 0<<8 | 1
	symOpCipher      = 1

	// StatusOK is a completed request; the others are the device's errors.
	StatusOK      = 0
	StatusErr     = 1
	StatusBadMsg  = 2
	StatusNotSupp = 3
	StatusInvSess = 4
	StatusNoSpace = 5

	hwReady = 1

	reqLen     = 72 // virtio_crypto_op_data_req and virtio_crypto_op_ctrl_req
	maxIV      = 16
	maxKey     = 64
	sessionIn  = 16 // virtio_crypto_session_input
	defaultMax = 16384 + 64
)

// StatusText names a device status byte.
func StatusText(s uint8) string {
	switch s {
	case StatusOK:
		return "ok"
	case StatusErr:
		return "error"
	case StatusBadMsg:
		return "bad message"
	case StatusNotSupp:
		return "not supported"
	case StatusInvSess:
		return "invalid session"
	case StatusNoSpace:
		return "no space"
	}
	return fmt.Sprintf("status %d", s)
}

// Config is what the device says of itself (struct virtio_crypto_config).
type Config struct {
	MaxDataQueues  uint32
	Services       uint32
	CipherAlgos    uint64 // bit n: cipher algorithm n
	MaxCipherKey   uint32
	MaxRequestSize uint64
}

// Has says whether the device offers cipher c.
func (c Config) Has(cipher Cipher) bool { return c.CipherAlgos&(1<<uint(cipher)) != 0 }

// reclaimedSessions is how many session ids reclaimSessions frees: QEMU's
// builtin backend numbers sessions from 0 and holds at most 256.
const reclaimedSessions = 256

// reclaimSessions destroys every session id a previous driver may have
// left. A virtio reset does not end sessions on QEMU's device (they belong
// to its backend), so a driver that was killed would otherwise leave them
// taken until the device runs out. The driver owns the device exclusively
// (VFIO), so no one else's sessions are lost; ids that are not sessions
// are answered with an error and ignored.
func (d *Device) reclaimSessions() {
	for id := range uint64(reclaimedSessions) {
		d.DestroySession(id)
	}
}

// probeKeys are key lengths to try sessions with, per cipher.
var probeKeyLen = map[Cipher]int{AESCBC: 16, AESCTR: 16, DES3CBC: 24}

// probe finds ciphers the device serves beyond those its configuration
// advertises — QEMU's builtin backend advertises AES-CBC alone but creates
// AES-CTR and 3DES-CBC sessions too — by creating and destroying a session
// of each, and adds them to Config.CipherAlgos. It returns what it found.
func (d *Device) probe() []Cipher {
	var found []Cipher
	for _, c := range []Cipher{AESCBC, AESCTR, DES3CBC} {
		if d.Config.Has(c) {
			continue
		}
		id, err := d.createSession(c, Encrypt, make([]byte, probeKeyLen[c]))
		if err != nil {
			continue
		}
		d.DestroySession(id)
		d.Config.CipherAlgos |= 1 << uint(c)
		found = append(found, c)
	}
	return found
}

// Options tune the driver.
type Options struct {
	// QueueSize is the number of descriptors of the data queue, two per
	// request, rounded up to a power of two and down to what the device
	// allows. 0: 256.
	QueueSize int
	// MaxData is the largest payload one request carries. 0: 16 KiB + 64.
	MaxData int
}

// Device is an open virtio-crypto device with one data queue driven by the
// caller and a control queue for sessions.
type Device struct {
	Address string
	Config  Config
	// Advertised is the cipher mask the device's configuration gave;
	// Probed the ciphers it served beyond it (see probe).
	Advertised uint64
	Probed     []Cipher

	vdev  *vfio.Device
	claim *vfio.Claim
	t     *transport
	data  *queue
	// ctrl is used from any goroutine; mu serialises it.
	mu   sync.Mutex
	ctrl *queue

	maxData int
}

// Open checks that the device at addr is a virtio-crypto device, binds it
// to vfio-pci (Close gives it back), resets it (clearing whatever
// a previous driver left, even one that crashed), negotiates features, sets
// up the first data queue and the control queue, and starts it.
func Open(addr string, opts Options) (_ *Device, err error) {
	if opts.QueueSize == 0 {
		opts.QueueSize = 256
	}
	if opts.MaxData == 0 {
		opts.MaxData = defaultMax
	}
	if opts.QueueSize < 2 || opts.QueueSize > 1<<15 {
		return nil, fmt.Errorf("virtio-crypto %s: queue size %d outside 2..32768", addr, opts.QueueSize)
	}
	for opts.QueueSize&(opts.QueueSize-1) != 0 { // split rings are a power of two long
		opts.QueueSize += opts.QueueSize & -opts.QueueSize
	}
	if err := CheckIdentity(addr); err != nil {
		return nil, err
	}
	claim, err := vfio.Bind(addr)
	if err != nil {
		return nil, err
	}
	d := &Device{Address: addr, claim: claim, maxData: opts.MaxData}
	defer func() {
		if err != nil {
			if cerr := d.Close(); cerr != nil {
				err = errors.Join(err, cerr)
			}
		}
	}()
	if d.vdev, err = vfio.Open(addr); err != nil {
		return nil, err
	}
	vdev := d.vdev
	if err := vdev.Reset(); err != nil {
		return nil, err
	}
	if err := vdev.EnableBusMaster(); err != nil {
		return nil, err
	}
	if d.t, err = newTransport(vdev); err != nil {
		return nil, err
	}
	if err := d.t.reset(); err != nil {
		return nil, err
	}
	d.t.setStatus(statusAcknowledge | statusDriver)
	if err := d.t.negotiate(); err != nil {
		d.t.setStatus(statusFailed)
		return nil, err
	}
	d.readConfig()
	if d.Config.MaxDataQueues == 0 {
		return nil, fmt.Errorf("virtio-crypto %s: device has no data queue", addr)
	}
	ctrlIndex := int(d.Config.MaxDataQueues) // the control queue follows the data queues
	if n := int(d.t.common.read16(ccNumQueues)); n <= ctrlIndex {
		return nil, fmt.Errorf("virtio-crypto %s: %d queues, no control queue after %d data queues", addr, n, d.Config.MaxDataQueues)
	}
	size := min(opts.QueueSize, d.t.queueMax(0))
	if d.data, err = newQueue(vdev, 0, size, reqLen+maxIV+opts.MaxData, opts.MaxData+1); err != nil {
		return nil, err
	}
	if d.ctrl, err = newQueue(vdev, ctrlIndex, min(8, d.t.queueMax(ctrlIndex)), reqLen+maxKey, sessionIn); err != nil {
		return nil, err
	}
	d.data.doorbell = d.t.enableQueue(0, d.data)
	d.ctrl.doorbell = d.t.enableQueue(ctrlIndex, d.ctrl)
	d.t.setStatus(statusDriverOK)
	if st := d.t.status(); st&(statusNeedsReset|statusFailed) != 0 {
		return nil, fmt.Errorf("virtio-crypto %s: device status %#x after start", addr, st)
	}
	if d.t.device.read32(0)&hwReady == 0 {
		return nil, fmt.Errorf("virtio-crypto %s: device is not ready (VIRTIO_CRYPTO_S_HW_READY clear)", addr)
	}
	d.reclaimSessions()
	d.Advertised = d.Config.CipherAlgos
	d.Probed = d.probe()
	return d, nil
}

func (d *Device) readConfig() {
	c := d.t.device
	d.Config = Config{
		MaxDataQueues:  c.read32(4),
		Services:       c.read32(8),
		CipherAlgos:    uint64(c.read32(16))<<32 | uint64(c.read32(12)),
		MaxCipherKey:   c.read32(36),
		MaxRequestSize: uint64(c.read32(52))<<32 | uint64(c.read32(48)),
	}
}

// CreateSession makes a cipher session on the device for one direction.
func (d *Device) CreateSession(c Cipher, op Op, key []byte) (uint64, error) {
	if !d.Config.Has(c) {
		return 0, fmt.Errorf("virtio-crypto %s: the device does not offer %s (cipher mask %#x)", d.Address, c, d.Config.CipherAlgos)
	}
	return d.createSession(c, op, key)
}

func (d *Device) createSession(c Cipher, op Op, key []byte) (uint64, error) {
	if len(key) > maxKey || uint32(len(key)) > d.Config.MaxCipherKey {
		return 0, fmt.Errorf("virtio-crypto %s: %s key of %d bytes is longer than the device takes (%d)", d.Address, c, len(key), d.Config.MaxCipherKey)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	out := d.ctrl.out(0)
	clear(out[:reqLen])
	le := binary.LittleEndian
	le.PutUint32(out[0:], opCreateSession)
	le.PutUint32(out[4:], uint32(c))
	le.PutUint32(out[12:], 0) // data queue 0
	le.PutUint32(out[16:], uint32(c))
	le.PutUint32(out[20:], uint32(len(key)))
	le.PutUint32(out[24:], uint32(op))
	le.PutUint32(out[64:], symOpCipher)
	copy(out[reqLen:], key)
	in, err := d.control(reqLen+len(key), sessionIn)
	clear(out[reqLen : reqLen+len(key)]) // keys do not stay in DMA memory
	if err != nil {
		return 0, fmt.Errorf("virtio-crypto %s: create %s session: %w", d.Address, c, err)
	}
	if st := le.Uint32(in[8:]); st != StatusOK {
		return 0, fmt.Errorf("virtio-crypto %s: create %s session: device says %s", d.Address, c, StatusText(uint8(st)))
	}
	return le.Uint64(in[0:]), nil
}

// DestroySession ends a session.
func (d *Device) DestroySession(id uint64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := d.ctrl.out(0)
	clear(out[:reqLen])
	binary.LittleEndian.PutUint32(out[0:], opDestroySession)
	binary.LittleEndian.PutUint64(out[16:], id)
	in, err := d.control(reqLen, sessionIn)
	if err != nil {
		return fmt.Errorf("virtio-crypto %s: destroy session %d: %w", d.Address, id, err)
	}
	if in[0] != StatusOK {
		return fmt.Errorf("virtio-crypto %s: destroy session %d: device says %s", d.Address, id, StatusText(in[0]))
	}
	return nil
}

// control runs one request on the control queue's slot 0 and waits for it.
func (d *Device) control(outLen, inLen int) ([]byte, error) {
	q := d.ctrl
	in := q.in(0)
	clear(in[:inLen])
	in[8] = 0xff // a status the device must overwrite
	q.setLens(0, outLen, inLen)
	q.post(0)
	q.publish()
	d.t.kick(q.doorbell, q.index)
	deadline := time.Now().Add(5 * time.Second)
	for q.reap(func(int, uint32) {}) == 0 {
		if st := d.t.status(); st&statusNeedsReset != 0 {
			return nil, errors.New("device needs a reset (it found a malformed request)")
		}
		if time.Now().After(deadline) {
			return nil, errors.New("no answer from the device in 5s")
		}
		time.Sleep(20 * time.Microsecond)
	}
	return in[:inLen], nil
}

// Slots is how many requests the data queue holds at once.
func (d *Device) Slots() int { return d.data.slots() }

// MaxData is the largest payload one request carries.
func (d *Device) MaxData() int { return d.maxData }

// Request returns slot i's buffers for a request with an IV of ivLen bytes
// (at most 16): iv and src for the caller to fill, dst where the device
// writes the result. The device reads the IV and then the source as one
// run, so src starts right after iv.
func (d *Device) Request(i, ivLen int) (iv, src, dst []byte) {
	out, in := d.data.out(i), d.data.in(i)
	return out[reqLen : reqLen+ivLen], out[reqLen+ivLen : reqLen+ivLen+d.maxData], in[:d.maxData]
}

// Post queues slot i, filled through Request(i, ivLen), as a request of
// session: n bytes of src ciphered into dst. The device sees it after Kick.
func (d *Device) Post(i int, session uint64, op Op, ivLen, n int) {
	out := d.data.out(i)
	clear(out[:reqLen])
	le := binary.LittleEndian
	code := uint32(opEncrypt)
	if op == Decrypt {
		code = opDecrypt
	}
	le.PutUint32(out[0:], code)
	le.PutUint64(out[8:], session)
	le.PutUint32(out[24:], uint32(ivLen))
	le.PutUint32(out[28:], uint32(n))
	le.PutUint32(out[32:], uint32(n))
	le.PutUint32(out[64:], symOpCipher)
	in := d.data.in(i)
	in[n] = 0xff // status, overwritten by the device
	d.data.setLens(i, reqLen+ivLen+n, n+1)
	d.data.post(i)
}

// Kick publishes the posted requests and rings the data queue's doorbell
// once for all of them.
func (d *Device) Kick() {
	d.data.publish()
	d.t.kick(d.data.doorbell, d.data.index)
}

// Reap calls done with the slot and status byte of every request the
// device completed since the last Reap, and returns how many.
func (d *Device) Reap(done func(slot int, status uint8)) int {
	return d.data.reap(func(slot int, written uint32) {
		in := d.data.in(slot)
		if written == 0 || int(written) > len(in) {
			done(slot, StatusErr)
			return
		}
		done(slot, in[written-1])
	})
}

// NeedsReset says whether the device flagged itself broken (e.g. after a
// malformed request): its queues are stopped until a reset.
func (d *Device) NeedsReset() bool { return d.t.status()&statusNeedsReset != 0 }

// Close resets the device, so it forgets its sessions and stops reading the
// queues, releases the DMA memory and the VFIO files, and gives the device
// back to the driver it had.
func (d *Device) Close() error {
	if d.t != nil {
		d.t.reset()
		d.t = nil
	}
	var errs []error
	if d.vdev != nil {
		errs = append(errs, d.vdev.Close())
		d.vdev = nil
	}
	if d.claim != nil {
		errs = append(errs, d.claim.Release())
		d.claim = nil
	}
	return errors.Join(errs...)
}
