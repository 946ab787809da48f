package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/espgw/espgw/internal/control"
	"github.com/espgw/espgw/sa"
)

// saControl are the `espgw sa` commands that change a running gateway
// through its control socket (with control: PATH in its configuration),
// without a reload. SAs are JSON objects with the SA file's fields, one or
// a list; each command is one atomic change; answers are JSON without keys.
func saControl() []*cobra.Command {
	var socket string
	flag := func(c *cobra.Command) *cobra.Command {
		c.Flags().StringVar(&socket, "socket", control.DefaultSocket, "the gateway's control socket")
		return c
	}
	del := &cobra.Command{
		Use:   "del SPI[@DST]…",
		Short: "Delete SAs of a running gateway (by SPI, with the destination when SAs share one)",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := control.Request{Op: "sa.del"}
			for _, a := range args {
				spi, dst, _ := strings.Cut(a, "@")
				req.IDs = append(req.IDs, control.SAID{SPI: spi, Dst: dst})
			}
			return ask(cmd, socket, req)
		},
	}
	list := &cobra.Command{
		Use: "list", Short: "List a running gateway's SAs with their counters (JSON, no keys)", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return ask(cmd, socket, control.Request{Op: "sa.list"}) },
	}
	return []*cobra.Command{
		flag(changeCommand("add", "Add SAs to a running gateway (JSON, the SA file's fields)", "sa.add", &socket)),
		flag(changeCommand("update", "Replace SAs of a running gateway (same SPI and destination) with new settings", "sa.update", &socket)),
		flag(del), flag(list), flag(newRekey(&socket)),
	}
}

func newRekey(socket *string) *cobra.Command {
	var sockets []string
	var grace time.Duration
	cmd := &cobra.Command{
		Use:   "rekey [--peer-socket S]… [--grace D] [FILE|-]",
		Short: "Roll SAs over to new ones, make-before-break",
		Long: `Roll SAs over to new ones without losing a packet, in the three phases VPP and
strongSwan use: every gateway installs the new inbound SAs beside the old
ones; then every gateway switches its outbound traffic (and the policies) to
the new SAs and deletes the old outbound ones, in one atomic change; after
the grace period, in which packets sealed with the old SAs arrive, every
gateway deletes the old inbound SAs. FILE is a JSON list of
{"replaces": "0x1001", "sa": {…the new SA…}}. The gateways are --socket and
every --peer-socket; each takes the part that is local to it.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			raw, err := readJSON(cmd, args)
			if err != nil {
				return err
			}
			var entries []struct {
				Replaces string          `json:"replaces"`
				SA       json.RawMessage `json:"sa"`
			}
			if err := json.Unmarshal(raw, &entries); err != nil {
				return fmt.Errorf("rekey: want a JSON list of {\"replaces\": SPI, \"sa\": {…}}: %w", err)
			}
			req := control.Request{Op: "sa.rekey"}
			var sas []json.RawMessage
			for i, e := range entries {
				if e.Replaces == "" || len(e.SA) == 0 {
					return fmt.Errorf("rekey: entry %d: want replaces and sa", i)
				}
				req.Replaces = append(req.Replaces, e.Replaces)
				sas = append(sas, e.SA)
			}
			if req.SA, err = json.Marshal(sas); err != nil {
				return err
			}
			all := append([]string{*socket}, sockets...)
			clients := make([]*control.Client, len(all))
			for i, p := range all {
				if clients[i], err = control.Dial(p); err != nil {
					return fmt.Errorf("rekey: %s: %w", p, err)
				}
				defer clients[i].Close()
			}
			for _, phase := range []string{control.PhaseInstall, control.PhaseSwitch, control.PhaseRetire} {
				if phase == control.PhaseRetire {
					time.Sleep(grace)
				}
				req.Phase = phase
				for i, c := range clients {
					if _, err := c.Do(req); err != nil {
						return fmt.Errorf("rekey: %s phase on %s: %w", phase, all[i], err)
					}
				}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "{\"ok\":true,\"changed\":%d}\n", len(entries))
			return nil
		},
	}
	cmd.Flags().StringArrayVar(&sockets, "peer-socket", nil, "another gateway of the tunnel (repeatable)")
	cmd.Flags().DurationVar(&grace, "grace", 2*time.Second, "how long the old inbound SAs stay after the switch")
	return cmd
}

func newPolicy() *cobra.Command {
	var socket string
	cmd := &cobra.Command{
		Use:   "policy add|del|list",
		Short: "Change the SPD of a running gateway through its control socket",
		Long: `Change the outbound policies of a running gateway through its control socket.
Policies are JSON objects with the SA file's spd: fields (priority, src, dst,
proto, sport, dport, action, sa), one or a list. An added policy goes after
those of equal priority; del takes policies as they read (or --index N from
policy list). Each command is one atomic change.`,
	}
	cmd.PersistentFlags().StringVar(&socket, "socket", control.DefaultSocket, "the gateway's control socket")
	add := changeCommand("add", "Add policies", "policy.add", &socket)
	var index int
	del := &cobra.Command{
		Use: "del [--index N | FILE|-]", Short: "Delete policies", Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if index < 0 {
				raw, err := readJSON(cmd, args)
				if err != nil {
					return err
				}
				return ask(cmd, socket, control.Request{Op: "policy.del", SPD: raw})
			}
			c, err := control.Dial(socket)
			if err != nil {
				return err
			}
			defer c.Close()
			resp, err := c.Do(control.Request{Op: "policy.list"})
			if err != nil {
				return err
			}
			if index >= len(resp.Policies) {
				return fmt.Errorf("policy del: --index %d: the gateway has %d policies", index, len(resp.Policies))
			}
			p := resp.Policies[index]
			raw, err := json.Marshal(policyEntry(p))
			if err != nil {
				return err
			}
			resp, err = c.Do(control.Request{Op: "policy.del", SPD: raw})
			if err != nil {
				return err
			}
			return PrintJSON(cmd, resp)
		},
	}
	del.Flags().IntVar(&index, "index", -1, "the policy's index in policy list")
	list := &cobra.Command{
		Use: "list", Short: "List the policies in lookup order (JSON)", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return ask(cmd, socket, control.Request{Op: "policy.list"})
		},
	}
	cmd.AddCommand(add, del, list)
	return cmd
}

// changeCommand is a command sending the JSON of FILE (or standard input)
// as the SAs, or for a policy op the policies, of one change to the gateway
// at *socket.
func changeCommand(use, short, op string, socket *string) *cobra.Command {
	return &cobra.Command{
		Use: use + " [FILE|-]", Short: short, Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			raw, err := readJSON(cmd, args)
			if err != nil {
				return err
			}
			req := control.Request{Op: op, SA: raw}
			if strings.HasPrefix(op, "policy.") {
				req = control.Request{Op: op, SPD: raw}
			}
			return ask(cmd, *socket, req)
		},
	}
}

// policyEntry is a listed policy as the SA file writes it.
func policyEntry(p control.PolicyInfo) map[string]any {
	m := map[string]any{"priority": p.Priority, "action": p.Action}
	for k, v := range map[string]string{"src": p.Src, "dst": p.Dst, "proto": p.Proto, "sport": p.SPorts, "dport": p.DPorts, "sa": p.SA} {
		if v != "" {
			m[k] = v
		}
	}
	return m
}

// readJSON reads the JSON argument: FILE, or standard input for "-" or none.
func readJSON(cmd *cobra.Command, args []string) (json.RawMessage, error) {
	var data []byte
	var err error
	name := "standard input"
	if len(args) == 0 || args[0] == "-" {
		data, err = io.ReadAll(io.LimitReader(cmd.InOrStdin(), 64<<20))
	} else {
		name = args[0]
		data, err = sa.ReadFileAtMost(args[0], 64<<20)
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	if !json.Valid(data) {
		return nil, fmt.Errorf("%s is not JSON", name)
	}
	return json.RawMessage(data), nil
}

// ask sends one request and prints the answer as JSON.
func ask(cmd *cobra.Command, socket string, req control.Request) error {
	c, err := control.Dial(socket)
	if err != nil {
		return err
	}
	defer c.Close()
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	return PrintJSON(cmd, resp)
}
