// Package telemetrytest reads metrics from the default Prometheus registry
// in tests.
package telemetrytest

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// Value is the value of the counter or gauge, or the sample count of the
// histogram, named name with exactly these labels in the default
// registry; 0 when there is none.
func Value(t testing.TB, name string, labels map[string]string) float64 {
	t.Helper()
	v, _ := Lookup(t, name, labels)
	return v
}

// Lookup is Value, and whether the registry has such a series at all.
func Lookup(t testing.TB, name string, labels map[string]string) (float64, bool) {
	t.Helper()
	families, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	metrics:
		for _, m := range f.GetMetric() {
			if len(m.GetLabel()) != len(labels) {
				continue
			}
			for _, l := range m.GetLabel() {
				if v, ok := labels[l.GetName()]; !ok || v != l.GetValue() {
					continue metrics
				}
			}
			switch {
			case m.GetHistogram() != nil:
				return float64(m.GetHistogram().GetSampleCount()), true
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue(), true
			}
			return m.GetCounter().GetValue(), true
		}
	}
	return 0, false
}

// Want fails t unless Value is want.
func Want(t testing.TB, name string, labels map[string]string, want float64) {
	t.Helper()
	if got := Value(t, name, labels); got != want {
		t.Errorf("%s%v = %v, want %v", name, labels, got, want)
	}
}
