package emul

import (
	"strings"
	"time"

	"github.com/espgw/espgw/sa"
)

// virtioProfile is QEMU 7.2's virtio-crypto-pci (builtin backend) driven
// by espgw's virtio engine in espgw's guest (see the package doc).
func virtioProfile() Profile {
	return Profile{
		Name:       "virtio-qemu-7.2",
		About:      "QEMU 7.2 virtio-crypto-pci (builtin backend) driven by espgw's virtio engine in a one-vCPU TCG guest, 2026",
		QueueDepth: 128, Aggregation: 128, Pipeline: 1, Units: 1,
		Ciphers:     []sa.Cipher{sa.CipherAESCBC, sa.CipherAESCTR, sa.Cipher3DES},
		RecordSetup: 10840 * time.Nanosecond, PerOp: 1640 * time.Nanosecond,
		PerByte: map[string]float64{"aes-128": 1.78, "aes-192": 1.78, "aes-256": 1.78, "3des": 29},
		Host:    6980 * time.Nanosecond, HostPerOp: 1010 * time.Nanosecond, HostPerByte: 0.44,
		HostCores: 1, HostCPU: 1,
		Latency: 2970 * time.Nanosecond,
	}
}

// virtioRows are the measured rows of the virtio-qemu-7.2 profile: each
// cell the fastest of its runs (5 to 9, interleaved, 1 s each; load only
// ever slows a run down), BENCHMARKS.md's virtio section.
func virtioRows() []Published {
	const src = "BenchmarkVirtioSpeed (espgw speed -elapsed -engine virtio -evp aes-128-cbc) in espgw's guest: QEMU 7.2 TCG, one vCPU, q35 + intel-iommu, virtio-crypto-pci with cryptodev-backend-builtin; 2026-12-01 12:00-12:18 UTC, fastest of 5-9 runs"
	row := func(batch, multi int, kbps ...float64) Published {
		return Published{Profile: "virtio-qemu-7.2", Alg: "aes-128-cbc", Batch: batch, Multi: multi, Sizes: VirtioSizes(), KBps: kbps, Source: src}
	}
	cipher := func(alg string, kbps ...float64) Published {
		p := row(16, 4, kbps...)
		p.Alg = alg
		p.Source = strings.Replace(strings.Replace(src, "aes-128-cbc", alg, 1), "5-9", "3", 1)
		return p
	}
	unfitted := func(p Published, sizes ...int) Published { p.Unfitted = sizes; return p }
	within := func(p Published, tol float64) Published { p.Tolerance = tol; return p }
	return []Published{
		row(1, 1, 692, 2818, 10911, 40825, 180107, 247927),
		within(row(2, 1, 1317, 5234, 15236, 74436, 252292, 372077), 0.30),
		within(row(4, 1, 2341, 9764, 38269, 130185, 356642, 330849), 0.30),
		within(row(8, 1, 2506, 9109, 35253, 137292, 392716, 516372), 0.35),
		within(unfitted(row(16, 1, 4833, 16382, 61810, 139282, 239965, 190380), 8192, 16384), 0.25),
		within(unfitted(row(32, 1, 2227, 17038, 60745, 211822, 369059, 299342), 16), 0.45),
		within(unfitted(row(1, 4, 1559, 6250, 28866, 92528, 259418, 369919), 8192), 0.30),
		within(unfitted(row(4, 4, 2208, 17775, 68934, 177136, 441603, 466154), 16), 0.25),
		row(16, 4, 7978, 31453, 103254, 258998, 558901, 601487),
		row(32, 4, 9566, 35641, 115776, 302410, 571445, 575023),
		// The other ciphers at one point of the curve, fastest of 3 runs.
		within(cipher("aes-192-cbc", 8469, 24375, 88888, 247641, 486052, 531145), 0.30),
		within(cipher("aes-256-cbc", 8666, 30667, 100030, 211472, 471837, 515751), 0.30),
		cipher("des-ede3-cbc", 6630, 16118, 26346, 31467, 34384, 35369),
	}
}
