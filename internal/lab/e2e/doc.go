// Package e2e holds the end-to-end tests: real espgw gateways in network
// namespaces.
//
// They need root, network namespaces and the tools scripts/setup.sh
// installs; with -short they skip. ESPGW_ENGINE and ESPGW_WAN_IO run every
// gateway on another engine or WAN I/O (scripts/test.sh runs them once more
// on aesni over AF_XDP).
package e2e
