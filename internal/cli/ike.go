package cli

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/espgw/espgw/ike"
	"github.com/espgw/espgw/sa"
)

// newIKE is `espgw ike`: IKEv2 with a peer.
func newIKE() *cobra.Command {
	cmd := &cobra.Command{Use: "ike", Short: "Negotiate SAs with an IKEv2 peer (strongSwan, libreswan, an appliance)"}
	cmd.AddCommand(newIKEInitiate())
	return cmd
}

func newIKEInitiate() *cobra.Command {
	var local, remote, localID, remoteID, pskFile, certFile, keyFile, caFile, proposals, espProposals, out string
	var localTS, remoteTS []string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "initiate --local A --remote B --local-id ID --remote-id ID {--psk-file F | --cert F --key F} [--ca F] --local-ts P --remote-ts P --out FILE",
		Short: "Set up an IKE SA and its first CHILD_SA with a peer and write the CHILD_SA as an SA file",
		Long: `initiate runs IKE_SA_INIT and IKE_AUTH with the peer at --remote, from
--local's ports 500 and 4500, and writes the negotiated
CHILD_SA's two SAs (tunnel mode; ESP in UDP on port 4500 when a NAT was
found) to --out, mode 0600, for ` + "`espgw run`" + ` (sa-file) or ` + "`espgw sa add`" + `.
Proposals are written as in strongSwan's swanctl.conf (proposals,
esp_proposals); identities as in its configuration ("@fqdn", "user@host",
an address, "@#hex" for a key id, "C=CH, O=Example, CN=gw1" for a DN).

This side authenticates with the pre-shared key of --psk-file, or with the
certificate of --cert (PEM, its own first, then intermediates) and its
private key --key (PEM: RSA, ECDSA or Ed25519), signing with RFC 7427
Digital Signatures when the peer announces them. The peer may authenticate
with the PSK, or with a certificate that chains to a CA of --ca (PEM) and
holds its identity. With a certificate, --local-id defaults to its
subject DN.

The IKE SA is not kept after the command ends: nothing answers the peer's
liveness checks or rekeys, so a peer with dead peer detection will in time
delete the CHILD_SA.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			la, err := netip.ParseAddr(local)
			if err != nil {
				return fmt.Errorf("--local: %w", err)
			}
			ra, err := netip.ParseAddr(remote)
			if err != nil {
				return fmt.Errorf("--remote: %w", err)
			}
			cfg := ike.Config{}
			if localID != "" {
				if cfg.LocalID, err = ike.ParseIdentity(localID); err != nil {
					return fmt.Errorf("--local-id: %w", err)
				}
			}
			if remoteID != "" {
				if cfg.RemoteID, err = ike.ParseIdentity(remoteID); err != nil {
					return fmt.Errorf("--remote-id: %w", err)
				}
			}
			if pskFile != "" {
				psk, err := os.ReadFile(pskFile)
				if err != nil {
					return fmt.Errorf("--psk-file: %w", err)
				}
				cfg.PSK = sa.Key(bytes.TrimRight(psk, "\r\n"))
			}
			if (certFile == "") != (keyFile == "") {
				return fmt.Errorf("--cert and --key go together")
			}
			if certFile != "" {
				if cfg.Certs, err = ike.LoadCertificates(certFile); err != nil {
					return fmt.Errorf("--cert: %w", err)
				}
				if cfg.Key, err = ike.LoadPrivateKey(keyFile); err != nil {
					return fmt.Errorf("--key: %w", err)
				}
			}
			if caFile != "" {
				if cfg.CAs, err = ike.LoadCertificates(caFile); err != nil {
					return fmt.Errorf("--ca: %w", err)
				}
			}
			if cfg.IKE, err = ike.ParseProposals(ike.ProtoIKE, proposals); err != nil {
				return fmt.Errorf("--proposals: %w", err)
			}
			if cfg.ESP, err = ike.ParseProposals(ike.ProtoESP, espProposals); err != nil {
				return fmt.Errorf("--esp-proposals: %w", err)
			}
			for _, f := range []struct {
				flag string
				in   []string
				dst  *[]ike.Selector
			}{{"--local-ts", localTS, &cfg.LocalTS}, {"--remote-ts", remoteTS, &cfg.RemoteTS}} {
				for _, p := range f.in {
					pr, err := netip.ParsePrefix(strings.TrimSpace(p))
					if err != nil {
						return fmt.Errorf("%s: %w", f.flag, err)
					}
					*f.dst = append(*f.dst, ike.PrefixSelector(pr))
				}
			}
			var tr *ike.Transport
			ep, err := ike.NewEndpoint(cfg, la, func(d ike.Datagram) error { return tr.Send(d) })
			if err != nil {
				return err
			}
			if tr, err = ike.Listen(la); err != nil {
				return err
			}
			defer tr.Close()
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			served := make(chan error, 1)
			go func() { served <- tr.Serve(ctx, ep) }()
			s, err := ep.Initiate(ctx, netip.AddrPortFrom(ra, ike.Port))
			cancel()
			<-served
			if err != nil {
				return err
			}
			children := s.Children()
			if len(children) == 0 {
				return fmt.Errorf("IKE SA with %s established without a CHILD_SA", ra)
			}
			c := children[0]
			in, outSA, err := c.SAs()
			if err != nil {
				return err
			}
			if err := sa.WriteFile(out, &sa.Config{SAs: []*sa.SA{in, outSA}}); err != nil {
				return err
			}
			encap := "raw ESP"
			if c.UDP {
				encap = "ESP in UDP 4500 (NAT found)"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: CHILD_SA in %#x out %#x, %s, %s, %v === %v; SAs written to %s\n",
				s, c.InSPI, c.OutSPI, c.Suite, encap, c.LocalTS, c.RemoteTS, out)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&local, "local", "", "this side's address (the IKE sockets bind to its ports 500 and 4500)")
	f.StringVar(&remote, "remote", "", "the peer's address")
	f.StringVar(&localID, "local-id", "", "this side's identity (with --cert, its subject DN when empty)")
	f.StringVar(&remoteID, "remote-id", "", "the peer's identity (any when empty)")
	f.StringVar(&pskFile, "psk-file", "", "a file holding the pre-shared key (one trailing newline ignored)")
	f.StringVar(&certFile, "cert", "", "this side's certificate chain, PEM, its own first")
	f.StringVar(&keyFile, "key", "", "the private key of --cert, PEM")
	f.StringVar(&caFile, "ca", "", "the CA certificates, PEM, that the peer's certificate must chain to")
	f.StringVar(&proposals, "proposals", "aes128-sha256-x25519", "IKE proposals, strongSwan syntax")
	f.StringVar(&espProposals, "esp-proposals", "aes128gcm16,aes128-sha256", "ESP proposals, strongSwan syntax")
	f.StringSliceVar(&localTS, "local-ts", nil, "the traffic this side protects (prefixes)")
	f.StringSliceVar(&remoteTS, "remote-ts", nil, "the peer's traffic (prefixes)")
	f.StringVar(&out, "out", "", "the SA file to write")
	f.DurationVar(&timeout, "timeout", 30*time.Second, "give up after this long")
	for _, name := range []string{"local", "remote", "local-ts", "remote-ts", "out"} {
		cmd.MarkFlagRequired(name)
	}
	return cmd
}
