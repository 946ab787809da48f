package gateway

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/espgw/espgw/esp"
	"github.com/espgw/espgw/sa"
)

// seqStore keeps, per outbound SA, an upper bound of the sequence numbers
// it may have sent, so that a gateway restarted after a crash with the same
// manual keys resumes above every number its peer has seen rather than
// being refused as a replay.
type seqStore struct{ dir string }

func (st seqStore) path(spi uint32) string {
	return filepath.Join(st.dir, fmt.Sprintf("seq-%08x", spi))
}

// resume returns cfg starting after the stored bound, if there is one.
func (st seqStore) resume(cfg *sa.SA) (*sa.SA, error) {
	data, err := os.ReadFile(st.path(cfg.SPI))
	if os.IsNotExist(err) {
		return cfg, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read sequence state of SA %#x: %w", cfg.SPI, err)
	}
	bound, err := strconv.ParseUint(strings.TrimSpace(string(data)), 10, 64)
	if err != nil {
		return nil, fmt.Errorf("sequence state %s: %w", st.path(cfg.SPI), err)
	}
	if bound <= cfg.InitialSeq {
		return cfg, nil
	}
	c := *cfg
	c.InitialSeq = bound
	return &c, nil
}

// reserve records a new bound durably before any packet above the old one
// goes out.
func (st seqStore) reserve(s *esp.SA, upTo uint64) error {
	tmp := st.path(s.SPI()) + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("reserve sequence numbers of SA %#x: %w", s.SPI(), err)
	}
	_, err = fmt.Fprintf(f, "%d\n", upTo)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, st.path(s.SPI()))
	}
	if err != nil {
		return fmt.Errorf("reserve sequence numbers of SA %#x: %w", s.SPI(), err)
	}
	return nil
}
