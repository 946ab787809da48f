package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/espgw/espgw/internal/control"
	"github.com/espgw/espgw/internal/gateway"
	"github.com/espgw/espgw/offload/engines"
)

func newRun(cat engines.Catalog) *cobra.Command {
	var file string
	var skip uint64
	var all bool
	cmd := &cobra.Command{
		Use:   "run -c FILE",
		Short: "Run one gateway from a configuration file",
		Long: `Run one espgw gateway: a TUN device, outer sockets and an offload engine,
with the SAs and policies of FILE. SIGINT or SIGTERM stop it and print the
final counters; SIGHUP reloads the SAs without dropping the tunnel. With
control: PATH in FILE, espgw sa and espgw policy change the SAs and
policies of the running gateway through that socket.

A gateway whose sequence journal (in state-dir) does not prove itself —
missing or emptied in a directory that held reservations, cut, changed,
a symbolic link, unreadable — refuses to start: its outbound SAs could
send numbers their peers already saw. --sequence-skip N tells it to go on,
each outbound SA resuming N above the highest bound the journal still
shows (or its initial-seq); the damaged journal is kept beside the new one.
N must exceed what any SA can have sent since its last intact record; an
SA without ESN that N takes past 2^32 is refused (it needs new keys).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if file == "" {
				return errors.New("run: -c FILE is required")
			}
			// Reading and loading the SAs allocates mostly what the gateway
			// keeps: a higher GC target until it is up spares collections
			// of a heap that only grows (a quarter of the start's CPU at
			// 100,000 SAs). runGateway puts it back.
			gc := debug.SetGCPercent(400)
			cfg, err := gateway.LoadConfig(file, cat)
			if err != nil {
				debug.SetGCPercent(gc)
				return err
			}
			cfg.SequenceSkip = skip
			return runGateway(cmd.Context(), cmd, cfg, all, gc)
		},
	}
	cmd.Flags().StringVarP(&file, "config", "c", "", "gateway configuration file (YAML)")
	cmd.Flags().Uint64Var(&skip, "sequence-skip", 0, "when the sequence journal does not prove itself, resume every outbound SA this far above the highest bound it still shows (default: refuse to start)")
	cmd.Flags().BoolVar(&all, "all", false, fmt.Sprintf("list every SA in the final counters (beyond %d SAs they show the totals, the %d with the most traffic and every SA with drops)", saRowLimit, topSAs))
	return cmd
}

func runGateway(ctx context.Context, cmd *cobra.Command, cfg *gateway.Config, all bool, gcPercent int) error {
	log := slog.Default()
	rt, err := gateway.Start(cfg, log)
	debug.SetGCPercent(gcPercent)
	if err != nil {
		return err
	}
	defer rt.Close()

	for _, l := range []struct {
		setting, addr, path string
		handler             http.Handler
	}{{"metrics", cfg.Metrics, "/metrics", rt.Handler()}, {"pprof", cfg.Pprof, "/debug/pprof/", gateway.ProfileHandler()}} {
		if l.addr == "off" || l.addr == "" {
			continue
		}
		ln, err := net.Listen("tcp", l.addr)
		if err != nil {
			return fmt.Errorf("%s: %s address %s: %w", cfg.File, l.setting, l.addr, err)
		}
		srv := &http.Server{Handler: l.handler, ReadHeaderTimeout: 5 * time.Second}
		go srv.Serve(ln)
		defer srv.Close()
		log.Info(l.setting, "url", "http://"+ln.Addr().String()+l.path)
		if ap, err := netip.ParseAddrPort(ln.Addr().String()); err == nil && !ap.Addr().IsLoopback() {
			log.Warn("served without authentication on a non-loopback address: anyone who can reach it can read it", "setting", l.setting, "addr", ln.Addr().String())
		}
	}

	if path := cfg.ControlPath(); path != "" {
		srv, err := control.Listen(path, rt, log)
		if err != nil {
			return fmt.Errorf("%s: %w", cfg.File, err)
		}
		defer srv.Close()
		defer func() {
			if st := srv.Stats(); st.Refused+st.Idle > 0 {
				log.Info("control socket: connections not served to the end", "refused", st.Refused, "idle", st.Idle, "idle-timeout", control.DefaultIdleTimeout)
			}
		}()
		go func() {
			if err := srv.Serve(ctx); err != nil {
				log.Error("control socket", "err", err)
			}
		}()
		log.Info("control socket", "path", path, "idle-timeout", control.DefaultIdleTimeout)
	}

	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				if err := rt.Reload(); err != nil {
					log.Error("reload failed; the SAs in force stay", "err", err)
				}
				debug.FreeOSMemory()
			}
		}
	}()

	// The data path starts with Run; the load's garbage goes back to the
	// kernel beside it, so the gateway's RSS is what its SAs hold.
	go gateway.ReturnLoadMemory(log)
	err = rt.Run(ctx)
	fmt.Fprintln(cmd.OutOrStdout(), "final counters:")
	printStats(cmd.OutOrStdout(), rt.Stats(), all)
	if err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	return nil
}
