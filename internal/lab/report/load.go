// Package report renders espgw's results as one self-contained HTML page.
//
// It renders bench reports, scenario results and demo reports as one
// self-contained HTML page, and compares runs figure by figure.
package report

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/espgw/espgw/internal/lab/bench"
	"github.com/espgw/espgw/internal/lab/demo"
	"github.com/espgw/espgw/internal/lab/runinfo"
	"github.com/espgw/espgw/internal/lab/scenario"
)

// Kinds of input a page shows.
const (
	KindBench    = "bench"
	KindTunnels  = "tunnels"
	KindIKE      = "ike"
	KindScenario = "scenario"
	KindDemo     = "demo"
)

// Run is one input file: exactly one of its reports is set.
type Run struct {
	File     string
	Label    string // A, B, C … in the order given
	Kind     string
	Bench    *bench.Report
	Tunnels  *bench.TunnelReport
	IKE      *bench.IKEReport
	Scenario *scenario.Document
	Demo     *demo.Report
}

// Machine is where the run ran, as its JSON says.
func (r *Run) Machine() runinfo.Machine {
	switch {
	case r.Bench != nil:
		return r.Bench.Machine
	case r.Tunnels != nil:
		return r.Tunnels.Machine
	case r.IKE != nil:
		return r.IKE.Machine
	case r.Scenario != nil:
		return r.Scenario.Machine
	case r.Demo != nil:
		return r.Demo.Machine
	}
	return runinfo.Machine{}
}

// Load reads the JSON files espgw bench --save/--json, espgw bench
// --tunnels and --ike-tunnels, espgw scenario run --json and espgw demo --json write, in
// order.
func Load(files ...string) ([]*Run, error) {
	var runs []*Run
	for i, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("report: %w", err)
		}
		r, err := Parse(b)
		if err != nil {
			return nil, fmt.Errorf("report: %s: %w", f, err)
		}
		r.File = filepath.Base(f)
		r.Label = label(i)
		runs = append(runs, r)
	}
	return runs, nil
}

func label(i int) string {
	if i < 26 {
		return string(rune('A' + i))
	}
	return fmt.Sprintf("R%d", i+1)
}

// Parse reads one JSON document and tells its kind by its fields.
func Parse(b []byte) (*Run, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(b, &top); err != nil {
		return nil, fmt.Errorf("not a JSON object: %w", err)
	}
	kind, err := kindOf(top)
	if err != nil {
		return nil, err
	}
	r := &Run{Kind: kind}
	var dst any
	switch kind {
	case KindBench:
		r.Bench = &bench.Report{}
		dst = r.Bench
	case KindTunnels:
		r.Tunnels = &bench.TunnelReport{}
		dst = r.Tunnels
	case KindIKE:
		r.IKE = &bench.IKEReport{}
		dst = r.IKE
	case KindScenario:
		r.Scenario = &scenario.Document{}
		dst = r.Scenario
	case KindDemo:
		r.Demo = &demo.Report{}
		dst = r.Demo
	}
	if err := json.Unmarshal(b, dst); err != nil {
		return nil, fmt.Errorf("as a %s report: %w", kind, err)
	}
	return r, nil
}

func kindOf(top map[string]json.RawMessage) (string, error) {
	if _, ok := top["wan_tshark"]; ok {
		return KindDemo, nil
	}
	if _, ok := top["ike_tunnels"]; ok {
		return KindIKE, nil
	}
	res, ok := top["results"]
	if !ok {
		return "", fmt.Errorf("no \"results\" or \"wan_tshark\": not a bench report, a scenario result or a demo report")
	}
	var rows []map[string]json.RawMessage
	if err := json.Unmarshal(res, &rows); err != nil {
		return "", fmt.Errorf("\"results\" is not a list of objects: %w", err)
	}
	has := func(k string) bool {
		if _, ok := top[k]; ok {
			return true
		}
		for _, r := range rows {
			if _, ok := r[k]; ok {
				return true
			}
		}
		return false
	}
	switch {
	case has("tunnels") || has("frame"):
		return KindTunnels, nil
	case has("verdicts"):
		return KindScenario, nil
	case has("ratios") || has("frames"):
		return KindBench, nil
	}
	if bytes.Equal(bytes.TrimSpace(res), []byte("[]")) || bytes.Equal(bytes.TrimSpace(res), []byte("null")) {
		return KindScenario, nil
	}
	return "", fmt.Errorf("\"results\" holds neither bench paths, tunnel counts nor scenarios")
}

// DemoRun is a demo report as a page's only run, name its file's name.
func DemoRun(name string, r *demo.Report) *Run {
	return &Run{File: name, Label: label(0), Kind: KindDemo, Demo: r}
}
