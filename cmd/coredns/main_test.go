package main

import (
	"slices"
	"testing"
)

func TestWithDirective(t *testing.T) {
	tests := []struct {
		in   []string
		want []string
	}{
		{[]string{"cache", "kubernetes", "forward"}, []string{"cache", "kubernetes", "multicluster", "forward"}},
		{[]string{"cache", "forward"}, []string{"cache", "forward", "multicluster"}},
		{[]string{"kubernetes", "multicluster"}, []string{"kubernetes", "multicluster"}},
	}
	for _, tt := range tests {
		in := slices.Clone(tt.in)
		if got := withDirective(in, "multicluster", "kubernetes"); !slices.Equal(got, tt.want) {
			t.Errorf("withDirective(%v) = %v, want %v", tt.in, got, tt.want)
		}
		if !slices.Equal(in, tt.in) {
			t.Errorf("withDirective changed its input to %v", in)
		}
	}
}
