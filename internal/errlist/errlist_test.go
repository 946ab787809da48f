package errlist

import (
	"fmt"
	"strings"
	"testing"
)

func TestList(t *testing.T) {
	for _, c := range []struct {
		n         int
		lines     int
		countLine string
	}{
		{0, 0, ""}, {1, 1, ""}, {Max, Max, ""}, {Max + 1, Max + 1, "… and 1 more problems"}, {1000, Max + 1, "… and 980 more problems"},
	} {
		var l List
		l.Add(nil)
		for i := range c.n {
			l.Add(fmt.Errorf("problem %d", i))
		}
		if l.Len() != c.n {
			t.Errorf("%d added: Len %d", c.n, l.Len())
		}
		err := l.Err()
		if c.n == 0 {
			if err != nil {
				t.Errorf("none added: %v", err)
			}
			continue
		}
		msg := err.Error()
		if lines := strings.Count(msg, "\n") + 1; lines != c.lines || !strings.Contains(msg, c.countLine) || !strings.HasPrefix(msg, "problem 0") {
			t.Errorf("%d added: %d lines, want %d with %q:\n%s", c.n, lines, c.lines, c.countLine, msg)
		}
	}
}

// A caller that checks Full and calls Skip gets the same list as one
// that adds every problem.
func TestFullSkip(t *testing.T) {
	var added, skipped List
	for i := range Max + 5 {
		err := fmt.Errorf("problem %d", i)
		added.Add(err)
		if skipped.Full() {
			skipped.Skip()
		} else {
			skipped.Add(err)
		}
	}
	if !skipped.Full() || skipped.Len() != added.Len() || skipped.Err().Error() != added.Err().Error() {
		t.Errorf("with Skip: %d, %v\nwith Add: %d, %v", skipped.Len(), skipped.Err(), added.Len(), added.Err())
	}
}
