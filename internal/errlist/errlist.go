// Package errlist collects an input's problems in bounded memory.
//
// It collects the problems found in one input, keeping the first Max and
// counting the rest, so that a file of garbage gives a short answer in
// bounded memory.
package errlist

import (
	"errors"
	"fmt"
)

// Max is how many problems a List keeps.
const Max = 20

// List is the problems found so far. Its zero value is empty.
type List struct {
	errs []error
	more int
}

// Add records err (a nil err is nothing): kept while fewer than Max are,
// otherwise only counted.
func (l *List) Add(err error) {
	switch {
	case err == nil:
	case len(l.errs) < Max:
		l.errs = append(l.errs, err)
	default:
		l.more++
	}
}

// Full reports whether Add would only count: Max problems are kept. A
// caller that builds costly errors may check it and call Skip instead.
func (l *List) Full() bool { return len(l.errs) >= Max }

// Skip counts a problem without keeping it, for a full List.
func (l *List) Skip() { l.more++ }

// Len is how many problems were added, kept or not.
func (l *List) Len() int { return len(l.errs) + l.more }

// Kept is the problems kept, in the order added; the caller may reorder it.
func (l *List) Kept() []error { return l.errs }

// Err joins the kept problems, and says how many more there were; nil when
// there were none.
func (l *List) Err() error {
	if l.more == 0 {
		return errors.Join(l.errs...)
	}
	return errors.Join(append(l.errs[:len(l.errs):len(l.errs)], fmt.Errorf("… and %d more problems not shown (the first %d are)", l.more, Max))...)
}
