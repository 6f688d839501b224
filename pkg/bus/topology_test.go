package bus

import (
	"fmt"
	"testing"
)

func TestPartitionsOf(t *testing.T) {
	t.Parallel()
	topo := Topology{Prefix: "p"}
	explicit := func(n int) []string {
		var s []string
		for i := range n {
			s = append(s, fmt.Sprintf("p.%s.%d", SubjectInbound, i))
		}
		return s
	}
	tests := []struct {
		name     string
		subjects []string
		want     int
		ok       bool
		legacy   bool
	}{
		{"wildcard of old streams", []string{"p." + SubjectInbound + ".>"}, legacyPartitions, true, true},
		{"eight", explicit(8), 8, true, false},
		{"one", explicit(1), 1, true, false},
		{"out of order", []string{"p." + SubjectInbound + ".1", "p." + SubjectInbound + ".0"}, 2, true, false},
		{"gap", []string{"p." + SubjectInbound + ".0", "p." + SubjectInbound + ".2"}, 0, false, false},
		{"twice", []string{"p." + SubjectInbound + ".0", "p." + SubjectInbound + ".0"}, 0, false, false},
		{"other prefix", []string{"q." + SubjectInbound + ".0"}, 0, false, false},
		{"not a number", []string{"p." + SubjectInbound + ".x"}, 0, false, false},
		{"negative", []string{"p." + SubjectInbound + ".-1"}, 0, false, false},
		{"none", nil, 0, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n, legacy, ok := topo.partitionsOf(SubjectInbound, tt.subjects)
			if n != tt.want || ok != tt.ok || legacy != tt.legacy {
				t.Fatalf("partitionsOf(%v) = %d, %v, %v; want %d, %v, %v", tt.subjects, n, legacy, ok, tt.want, tt.legacy, tt.ok)
			}
		})
	}
}

// Every key lands in a partition the topology has, and the same one each time.
func TestPartitionIsStableAndInRange(t *testing.T) {
	t.Parallel()
	for _, n := range []int{0, 1, 8, 16} {
		topo := Topology{Partitions: n}
		for i := range 200 {
			key := fmt.Sprintf("telegram:bot:%d", i)
			p := topo.Partition(key)
			if p < 0 || p >= topo.PartitionCount() || p != topo.Partition(key) {
				t.Fatalf("partitions %d: key %q in partition %d", n, key, p)
			}
		}
	}
}
