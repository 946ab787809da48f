package runinfo

import "testing"

func TestDescribe(t *testing.T) {
	m := Describe()
	if m.Kernel == "" || m.CPU == "" || m.CPUs < 1 || m.Version == "" || m.Go == "" {
		t.Fatalf("Describe() = %+v: a field is empty", m)
	}
	if !m.SameMachine(m) {
		t.Fatal("a machine is not the same as itself")
	}
	o := m
	o.Host += "-other"
	if m.SameMachine(o) {
		t.Fatal("two hosts taken for one machine")
	}
}

func TestString(t *testing.T) {
	m := Machine{Host: "h", Kernel: "6.1", CPU: "EPYC", CPUs: 2, Version: "v1", Go: "go1.26"}
	if got, want := m.String(), "h, kernel 6.1, EPYC (2 CPUs), espgw v1, go1.26"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}
