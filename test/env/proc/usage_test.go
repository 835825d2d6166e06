package proc

import (
	"os"
	"testing"
)

func TestCPUSeconds(t *testing.T) {
	for _, tc := range []struct {
		name, stat string
		want       float64
		fails      bool
	}{
		{name: "plain", stat: "42 (controller) S 1 42 42 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 9 0 100", want: 3.25},
		{name: "command with spaces and parentheses", stat: "7 (a) b (c) R 1 7 7 0 -1 0 0 0 0 0 1 2 0 0 20 0 1 0 5", want: 0.03},
		{name: "no command", stat: "7 a R 1", fails: true},
		{name: "cut short", stat: "7 (a) R 1 2 3", fails: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := cpuSeconds([]byte(tc.stat))
			if tc.fails != (err != nil) || got != tc.want {
				t.Errorf("cpuSeconds(%q) = %v, %v; want %v, fails %v", tc.stat, got, err, tc.want, tc.fails)
			}
		})
	}
}

func TestUsageOfSelf(t *testing.T) {
	u, err := UsageOf(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if u.RSS <= 0 || u.PeakRSS < u.RSS || u.CPUSeconds < 0 {
		t.Errorf("UsageOf(self) = %+v: want 0 < RSS <= PeakRSS and CPU >= 0", u)
	}
}
