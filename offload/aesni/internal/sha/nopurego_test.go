//go:build !purego

package sha

const purego = false
