package kernelpeer

import (
	"context"
	"fmt"
)

// ReplaceWithCommands flushes the guest's SAs and policies and runs cmds
// (from XFRMCommands, possibly amended by the caller), in one round trip.
// Errors never carry the commands' keys.
func (p *Peer) ReplaceWithCommands(ctx context.Context, cmds []Command) error {
	all := append([]Command{{Args: []string{"xfrm", "policy", "flush"}}, {Args: []string{"xfrm", "state", "flush"}}}, cmds...)
	if out, err := p.Run(ctx, script(all)); err != nil {
		return fmt.Errorf("install %d XFRM commands in the kernel peer: %w", len(cmds), redactErr(err, out))
	}
	return nil
}

// Script joins commands into a busybox sh script for Peer.Run, one per
// line, each argument quoted, stopping at the first failure. It holds the
// commands' keys: never log it.
func Script(cmds []Command) string { return script(cmds) }
