package wanrelay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"reflect"
	"time"

	"github.com/espgw/espgw/internal/lab/impair"
	"github.com/espgw/espgw/internal/lab/labyaml"
)

// Main runs a relay for the espgw CLI's internal subcommand: it opens the
// relay, serves GET /counters on cfg.Control (a Unix socket path, reachable
// from every namespace), forwards until ctx is done, then writes the final
// counters to cfg.Counters. It returns the first error of any of these.
func Main(ctx context.Context, cfg Config) error {
	r, err := New(cfg)
	if err != nil {
		return err
	}
	defer r.Close()
	var srv *http.Server
	if cfg.Control != "" {
		if srv, err = r.serveControl(cfg.Control); err != nil {
			return err
		}
	}
	runErr := r.Run(ctx)
	if srv != nil {
		shut, cancel := context.WithTimeout(context.Background(), time.Second)
		srv.Shutdown(shut)
		cancel()
		os.Remove(cfg.Control)
	}
	var dumpErr error
	if cfg.Counters != "" {
		dumpErr = writeCounters(cfg.Counters, r.Counters())
	}
	return errors.Join(runErr, dumpErr, r.Close())
}

// ControlHandler answers GET /counters with the relay's counters as JSON.
func (r *Relay) ControlHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /counters", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(r.Counters())
	})
	return mux
}

func (r *Relay) serveControl(path string) (*http.Server, error) {
	os.Remove(path) // a socket left by an earlier run
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("wan relay control socket: %w", err)
	}
	srv := &http.Server{Handler: r.ControlHandler(), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			r.log.Error("wan relay control socket", "path", path, "err", err)
		}
	}()
	return srv, nil
}

// ReadControl asks a running relay for its counters over its control
// socket.
func ReadControl(ctx context.Context, path string) (Counters, error) {
	var c Counters
	client := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", path)
		}}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://relay/counters", nil)
	if err != nil {
		return c, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return c, fmt.Errorf("ask wan relay at %s: %w", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return c, fmt.Errorf("ask wan relay at %s: %s", path, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&c); err != nil {
		return c, fmt.Errorf("decode counters from wan relay at %s: %w", path, err)
	}
	return c, nil
}

func writeCounters(path string, c Counters) error {
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return fmt.Errorf("encode wan relay counters: %w", err)
	}
	b = append(b, '\n')
	if path == "-" {
		_, err = os.Stdout.Write(b)
	} else {
		err = os.WriteFile(path, b, 0o644)
	}
	if err != nil {
		return fmt.Errorf("write wan relay counters to %s: %w", path, err)
	}
	return nil
}

// LoadConfig reads a relay configuration from a YAML file, rejecting
// unknown fields; errors name the file and line.
func LoadConfig(path string) (Config, error) {
	var c Config
	b, err := os.ReadFile(path)
	if err != nil {
		return c, fmt.Errorf("wan relay config: %w", err)
	}
	if err := labyaml.Decode(path, b, &c); err != nil {
		return c, fmt.Errorf("wan relay config: %w", err)
	}
	for _, ic := range []*impair.Config{&c.AToB, &c.BToA} {
		if !reflect.ValueOf(*ic).IsZero() {
			if err := ic.Validate(); err != nil {
				return c, fmt.Errorf("wan relay config %s: %w", path, err)
			}
		}
	}
	return c, nil
}
