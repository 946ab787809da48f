package emul

// Published is one row of a table a profile was calibrated against:
// `openssl speed -evp Alg [-multi Multi]` on the machine the profile models,
// in 1000s of bytes per second at the buffer sizes of PublishedSizes.
type Published struct {
	Profile string // the profile's name ("ubsec-2014", "t4", "t4-software")
	Alg     string // openssl's -evp name
	Multi   int    // openssl's -multi (1: one process)
	KBps    [5]float64
}

// PublishedSizes are the buffer sizes of the published tables' columns.
func PublishedSizes() [5]int { return [5]int{16, 64, 256, 1024, 8192} }

// PublishedTables returns the published rows: NetBSD 6.1.4 on a Xeon X3430
// with a ubsec(4) card through cryptodev, `openssl speed -engine cryptodev
// -evp ALG -elapsed [-multi N]` (2014), and a SPARC T4 with and without
// its crypto instructions, `openssl speed -evp aes-128-cbc` (2012).
func PublishedTables() []Published {
	return []Published{
		{"ubsec-2014", "aes-128-cbc", 1, [5]float64{583.00, 2316.23, 7995.65, 25280.62, 80001.28}},
		{"ubsec-2014", "aes-128-cbc", 4, [5]float64{2128.38, 8704.95, 30407.37, 68008.22, 140479.50}},
		{"ubsec-2014", "aes-128-cbc", 8, [5]float64{3030.23, 12113.82, 40796.43, 66674.68, 140332.70}},
		{"ubsec-2014", "aes-128-cbc", 16, [5]float64{3574.88, 14659.51, 44433.10, 81677.83, 138982.24}},
		{"ubsec-2014", "des-ede3-cbc", 1, [5]float64{562.47, 2247.68, 7740.48, 24370.21, 76057.69}},
		{"ubsec-2014", "aes-192-cbc", 1, [5]float64{583.69, 2304.12, 7840.50, 24367.24, 73216.34}},
		{"ubsec-2014", "aes-256-cbc", 1, [5]float64{586.60, 2223.53, 7567.24, 23016.65, 66662.74}},
		{"t4", "aes-128-cbc", 1, [5]float64{413248.17, 784163.48, 1008435.11, 1061075.63, 1103601.66}},
		{"t4-software", "aes-128-cbc", 1, [5]float64{85871.89, 92796.71, 98383.53, 100017.49, 100256.43}},
	}
}
