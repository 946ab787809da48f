// Package iketunnel tests espgw gateways that bring their tunnels up with
// IKEv2 themselves (the ike: section of the gateway configuration):
// against each other and against strongSwan's charon, in network
// namespaces, with real traffic, rekeys, deletes and a peer's restart.
package iketunnel
