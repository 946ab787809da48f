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
