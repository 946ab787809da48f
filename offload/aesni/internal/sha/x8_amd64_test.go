//go:build amd64 && !purego

package sha

func x8Runs(h Hash) bool { return h == SHA1 && hasX8() }

func blocks8(h Hash, x *x8, n int) { sha1x8(x, n) }
