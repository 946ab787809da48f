package scenario

import (
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/espgw/espgw/internal/lab/runinfo"
)

// PrintTable writes the verdict table: one block per scenario, a line per
// traffic step and per expectation, and the conservation equations that
// did not balance.
func PrintTable(w io.Writer, results []*Result) {
	pass := 0
	peer := ""
	for _, r := range results {
		if r.Peer != peer && r.Peer == PeerLinuxXFRM {
			fmt.Fprintf(w, "\n== kernel peer: gw2 is the Linux kernel's ESP (peer: linux-xfrm) ==\n\n")
		}
		peer = r.Peer
		verdict := "FAIL"
		if r.Pass {
			verdict = "PASS"
			pass++
		}
		fmt.Fprintf(w, "%s  %s  (%.1fs)\n", verdict, r.Name, r.Seconds)
		if r.Error != "" {
			fmt.Fprintf(w, "      error: %s\n", r.Error)
		}
		if r.Hint != "" {
			fmt.Fprintf(w, "      hint: %s\n", r.Hint)
		}
		for _, st := range r.Steps {
			line := fmt.Sprintf("      step %-12s %-6s sent %d, received %d", st.Name, st.Kind, st.Sent, st.Received)
			if st.Mismatched > 0 {
				line += fmt.Sprintf(", mismatched %d", st.Mismatched)
			}
			if st.BPS > 0 {
				line += fmt.Sprintf(", %.1f Mbit/s", st.BPS/1e6)
			}
			if l := latencyMetricsOf(st.Latencies); l != nil {
				line += fmt.Sprintf(", one-way latency min %s p50 %s p99 %s max %s", seconds(l["latency.min"]), seconds(l["latency.p50"]), seconds(l["latency.p99"]), seconds(l["latency.max"]))
			}
			if st.Error != "" {
				line += ", error: " + st.Error
			}
			if st.Detail != "" && st.Received != st.Sent {
				line += " " + st.Detail
			}
			fmt.Fprintln(w, line)
		}
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		for _, v := range r.Verdicts {
			mark := "ok"
			if !v.Pass {
				mark = "FAILED"
			}
			fmt.Fprintf(tw, "      %s\t%s %s\tgot %s\twant %s\n", mark, v.Metric, v.Expr, num(v.Got), num(v.Want))
		}
		tw.Flush()
		if !r.Pass {
			for _, n := range []string{"hostA", "gw1", "gw2", "hostB"} {
				if len(r.Kernel[n]) > 0 {
					fmt.Fprintf(w, "      kernel counters in %s: %v\n", n, r.Kernel[n])
					if note := corruptedWhere(n, r.Kernel[n]); note != "" {
						fmt.Fprintf(w, "      %s\n", note)
					}
				}
			}
		}
		for _, b := range r.Balances {
			if b.In != b.Out {
				fmt.Fprintf(w, "      unbalanced %s: %s\n", b.Where, b.Terms)
			}
		}
	}
	fmt.Fprintf(w, "%d of %d scenarios passed\n", pass, len(results))
}

func seconds(v float64) string {
	return time.Duration(v * float64(time.Second)).Round(10 * time.Microsecond).String()
}

func num(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'g', 6, 64)
}

// Document is what WriteJSON writes: the results and where they ran.
type Document struct {
	Results []*Result       `json:"results"`
	Machine runinfo.Machine `json:"machine"`
}

// WriteJSON writes the results as one JSON document, with this machine's
// description.
func WriteJSON(w io.Writer, results []*Result) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(Document{Results: results, Machine: runinfo.Describe()})
}

type junitSuites struct {
	XMLName xml.Name     `xml:"testsuites"`
	Suites  []junitSuite `xml:"testsuite"`
}

type junitSuite struct {
	Name     string      `xml:"name,attr"`
	Tests    int         `xml:"tests,attr"`
	Failures int         `xml:"failures,attr"`
	Errors   int         `xml:"errors,attr"`
	Time     string      `xml:"time,attr"`
	Cases    []junitCase `xml:"testcase"`
}

type junitCase struct {
	Name      string        `xml:"name,attr"`
	ClassName string        `xml:"classname,attr"`
	Time      string        `xml:"time,attr"`
	Failure   *junitMessage `xml:"failure,omitempty"`
	Error     *junitMessage `xml:"error,omitempty"`
	SystemOut string        `xml:"system-out,omitempty"`
}

type junitMessage struct {
	Message string `xml:"message,attr"`
	Body    string `xml:",chardata"`
}

// WriteJUnit writes the results as JUnit XML: a test suite per scenario
// file, a test case per scenario, failed expectations as failures.
func WriteJUnit(path string, results []*Result) error {
	var doc junitSuites
	idx := map[string]int{}
	for _, r := range results {
		i, ok := idx[r.File]
		if !ok {
			i = len(doc.Suites)
			idx[r.File] = i
			doc.Suites = append(doc.Suites, junitSuite{Name: r.File})
		}
		s := &doc.Suites[i]
		c := junitCase{Name: r.Name, ClassName: "scenario", Time: fmt.Sprintf("%.3f", r.Seconds)}
		var failed []string
		for _, v := range r.Verdicts {
			if !v.Pass {
				failed = append(failed, fmt.Sprintf("%s:%d: %s %s: got %s, want %s", r.File, v.Line, v.Metric, v.Expr, num(v.Got), num(v.Want)))
			}
		}
		if r.Error != "" {
			c.Error = &junitMessage{Message: r.Error, Body: r.Error}
			s.Errors++
		} else if len(failed) > 0 {
			c.Failure = &junitMessage{Message: fmt.Sprintf("%d expectations failed", len(failed)), Body: strings.Join(failed, "\n")}
			s.Failures++
		}
		var b strings.Builder
		PrintTable(&b, []*Result{r})
		c.SystemOut = b.String()
		s.Tests++
		t, _ := strconv.ParseFloat(s.Time, 64)
		s.Time = fmt.Sprintf("%.3f", t+r.Seconds)
		s.Cases = append(s.Cases, c)
	}
	out, err := xml.MarshalIndent(doc, "", "  ")
	if err != nil {
		return fmt.Errorf("junit report: %w", err)
	}
	out = append([]byte(xml.Header), append(out, '\n')...)
	if err := os.WriteFile(path, out, 0o644); err != nil {
		return fmt.Errorf("junit report: %w", err)
	}
	return nil
}

// corruptedWhere says, for an end host whose kernel counted transport
// checksum errors during the traffic, where such a packet was corrupted:
// not on the WAN, whose ESP the receiving gateway's ICV check guards, but
// before the sending gateway sealed it (its TUN read, where it completes
// offloaded checksums) or after the receiving one opened it.
func corruptedWhere(host string, moved map[string]uint64) string {
	if host != "hostA" && host != "hostB" {
		return ""
	}
	n := moved["UdpInCsumErrors"] + moved["Udp6InCsumErrors"] + moved["TcpInCsumErrors"]
	if n == 0 {
		return ""
	}
	from, to := "gw1", "gw2"
	if host == "hostA" {
		from, to = "gw2", "gw1"
	}
	return fmt.Sprintf("%s's kernel refused %d packets for a bad UDP or TCP checksum: each was corrupted before %s sealed it (its TUN read completes offloaded checksums) or after %s opened it, not on the WAN (the ICV guards it)", host, n, from, to)
}
