//go:build !amd64 || purego

package sha

func x8Runs(h Hash) bool { return false }

func blocks8(h Hash, x *x8, n int) {}
