package aesni_test

import (
	"testing"

	"github.com/espgw/espgw/offload/aesni"
	"github.com/espgw/espgw/offload/engines"
)

func TestRegistered(t *testing.T) {
	e, err := engines.New(aesni.Name, engines.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if e.Name() != aesni.Name {
		t.Errorf("engines.New(%q) made %q", aesni.Name, e.Name())
	}
}
