package emul

// Published is one row of a table a profile was calibrated against: a
// speed test of the machine the profile models, in 1000s of bytes per
// second at the buffer sizes of Sizes (openssl speed's five; the virtio
// rows have espgw speed's six).
type Published struct {
	Profile string // the profile's name ("ubsec-2014", "t4", "virtio-qemu-7.2", …)
	Alg     string // openssl's -evp name
	Multi   int    // streams: openssl's or espgw speed's -multi (1: one)
	Batch   int    // ops per submitted batch: espgw speed's -batch (0 or 1: one)
	Sizes   []int  // buffer sizes of the columns
	KBps    []float64
	// Tolerance is how far a cell of the profile may be from this row
	// (TestCalibration); 0 is the default, ±15%. A row with its own says
	// why in the package documentation.
	Tolerance float64
	// Unfitted are the sizes of cells the profile is not held to (nor
	// fitted on): measured behaviour outside the model, which the package
	// documentation names.
	Unfitted []int
	Source   string // where and when the row was measured
}

// PublishedSizes are the buffer sizes of openssl speed's columns.
func PublishedSizes() []int { return []int{16, 64, 256, 1024, 8192} }

// VirtioSizes are the buffer sizes of espgw speed's columns.
func VirtioSizes() []int { return []int{16, 64, 256, 1024, 8192, 16384} }

// PublishedTables returns the published rows: NetBSD 6.1.4 on a Xeon X3430
// with a ubsec(4) card through cryptodev, `openssl speed -engine cryptodev
// -evp ALG -elapsed [-multi N]` (2014); a SPARC T4 with and without its
// crypto instructions, `openssl speed -evp aes-128-cbc` (2012); and QEMU
// 7.2's virtio-crypto device driven by espgw's virtio engine, measured in
// espgw's guest (BENCHMARKS.md).
func PublishedTables() []Published {
	const (
		netbsd = "NetBSD 6.1.4, Xeon X3430, Broadcom ubsec(4) via cryptodev, openssl speed -engine cryptodev -elapsed (2014)"
		t4     = "SPARC T4, openssl speed -evp (2012)"
	)
	ubsec := func(alg string, multi int, kbps ...float64) Published {
		return Published{Profile: "ubsec-2014", Alg: alg, Multi: multi, Sizes: PublishedSizes(), KBps: kbps, Source: netbsd}
	}
	rows := []Published{
		ubsec("aes-128-cbc", 1, 583.00, 2316.23, 7995.65, 25280.62, 80001.28),
		ubsec("aes-128-cbc", 4, 2128.38, 8704.95, 30407.37, 68008.22, 140479.50),
		ubsec("aes-128-cbc", 8, 3030.23, 12113.82, 40796.43, 66674.68, 140332.70),
		ubsec("aes-128-cbc", 16, 3574.88, 14659.51, 44433.10, 81677.83, 138982.24),
		ubsec("des-ede3-cbc", 1, 562.47, 2247.68, 7740.48, 24370.21, 76057.69),
		ubsec("aes-192-cbc", 1, 583.69, 2304.12, 7840.50, 24367.24, 73216.34),
		ubsec("aes-256-cbc", 1, 586.60, 2223.53, 7567.24, 23016.65, 66662.74),
		{Profile: "t4", Alg: "aes-128-cbc", Multi: 1, Sizes: PublishedSizes(), Source: t4,
			KBps: []float64{413248.17, 784163.48, 1008435.11, 1061075.63, 1103601.66}},
		{Profile: "t4-software", Alg: "aes-128-cbc", Multi: 1, Sizes: PublishedSizes(), Source: t4,
			KBps: []float64{85871.89, 92796.71, 98383.53, 100017.49, 100256.43}},
	}
	return append(rows, virtioRows()...)
}
