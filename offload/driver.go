package offload

// Driver names the implementation that does an engine's work for one
// algorithm, for engines that hand the work to someone else's code (the
// kernel's crypto drivers behind AF_ALG): what `espgw speed`, `espgw stats`
// and /metrics print so a user sees which card or module was measured.
type Driver struct {
	Algorithm string `json:"algorithm"`      // what was asked for, e.g. authenc(hmac(sha1),cbc(aes))
	Driver    string `json:"driver"`         // what serves it, e.g. authenc(hmac(sha1-generic),virtio_crypto_aes_cbc)
	Module    string `json:"module"`         // the modules of its parts, e.g. "sha1-generic: kernel, virtio_crypto_aes_cbc: virtio_crypto"
	Note      string `json:"note,omitempty"` // a caveat the user should see, e.g. a kernel that hides hardware
}

// DriverReporter is implemented by engines that can say which drivers did
// their work.
type DriverReporter interface {
	Drivers() []Driver
}
