package impair

import (
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

func TestConfigYAML(t *testing.T) {
	src := `
seed: 7
loss: 1.5
burst: {p: 2, r: 40}
corrupt: {percent: 3, bytes: 2}
truncate: {percent: 1, by: 16}
replay: {percent: 5, after: 20ms}
reorder: {percent: 4, depth: 5}
delay: {time: 10ms, jitter: 2ms}
rewrite_spi: {spi: 0x2002}
`
	var c Config
	if err := yaml.Unmarshal([]byte(src), &c); err != nil {
		t.Fatal(err)
	}
	want := DefaultConfig()
	want.Seed, want.Loss = 7, 1.5
	want.Burst = Burst{P: 2, R: 40, LossBad: 100}
	want.Corrupt = Corrupt{Percent: 3, Bytes: 2, From: 8}
	want.Truncate = Truncate{Percent: 1, By: 16}
	want.Replay = Replay{Percent: 5, After: 20 * time.Millisecond, History: 1024}
	want.Reorder = Reorder{Percent: 4, Depth: 5, MaxHold: 100 * time.Millisecond}
	want.Delay = Delay{Time: 10 * time.Millisecond, Jitter: 2 * time.Millisecond}
	want.RewriteSPI = RewriteSPI{Percent: 100, SPI: 0x2002}
	if c.Validate() != nil || strings.Join(c.Match, ",") != "esp,udp/4500" {
		t.Fatalf("decoded config invalid or match lost: %+v", c)
	}
	if !equalConfig(c, want) {
		t.Fatalf("decoded\n%+v\nwant\n%+v", c, want)
	}
}

func equalConfig(a, b Config) bool {
	a.Match, b.Match = nil, nil
	return a.Seed == b.Seed && a.Loss == b.Loss && a.Burst == b.Burst && a.Corrupt == b.Corrupt &&
		a.Truncate == b.Truncate && a.Replay == b.Replay && a.Reorder == b.Reorder && a.Delay == b.Delay &&
		a.RewriteSPI == b.RewriteSPI && a.Duplicate == b.Duplicate && a.Limit == b.Limit
}

func TestConfigErrors(t *testing.T) {
	tests := []struct{ src, want string }{
		{"loss: 101", "loss 101"},
		{"lost: 1", "field lost not found"},
		{"burst: {p: 1}", "burst.r is 0"},
		{"truncate: {percent: 1}", "exactly one of to"},
		{"truncate: {percent: 1, to: 4, by: 4}", "exactly one of to"},
		{"corrupt: {percent: 1, from: 10, to: 5}", "corrupt.to 5"},
		{"match: [esp, tcp/80]", `match[1] "tcp/80"`},
		{"match: []", "match is empty"},
		{"reorder: {percent: 1, depth: 0}", "reorder.depth 0"},
	}
	for _, tt := range tests {
		var c Config
		err := yaml.Unmarshal([]byte(tt.src), &c)
		if err == nil {
			err = c.Validate()
		}
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error %v, want it to say %q", tt.src, err, tt.want)
		}
	}
}
