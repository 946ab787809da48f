package aesni_test

import (
	"testing"

	"github.com/espgw/espgw/offload/aesni"
	"github.com/espgw/espgw/offload/engines"
)

func TestRegistered(t *testing.T) {
	e, err := engines.Product{}.Open(aesni.Name, engines.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if e.Name() != aesni.Name {
		t.Errorf("engines.Product.Open(%q) made %q", aesni.Name, e.Name())
	}
}
