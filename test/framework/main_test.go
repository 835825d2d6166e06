package framework

import (
	"errors"
	"slices"
	"testing"
)

// tests stands for a *testing.M whose tests end with code.
type tests int

func (t tests) Run() int { return int(t) }

// The exit code and what runs, in which order, for each way a suite can end.
func TestSuiteRun(t *testing.T) {
	fail := errors.New("fail")
	for _, tc := range []struct {
		name               string
		tests              tests
		setup, check, stop error
		want               int
		ran                []string
	}{
		{"pass", 0, nil, nil, nil, 0, []string{"check", "stop 2 (passed)", "stop 1 (passed)"}},
		{"tests fail: no check", 1, nil, nil, nil, 1, []string{"stop 2 (failed)", "stop 1 (failed)"}},
		{"check fails", 0, nil, fail, nil, 1, []string{"check", "stop 2 (failed)", "stop 1 (failed)"}},
		{"a cleanup fails, the others run", 0, nil, nil, fail, 1, []string{"check", "stop 2 (passed)", "stop 1 (passed)"}},
		{"setup fails: no tests, what it started stops", 0, fail, nil, nil, 1, []string{"stop 1 (failed)"}},
	} {
		var ran []string
		suite := Suite{Setup: func(s *Setup) error {
			for _, n := range []string{"1", "2"} {
				if n == "2" && tc.setup != nil {
					return tc.setup
				}
				s.Cleanup(func() error {
					state := map[bool]string{true: "failed", false: "passed"}[s.Failed()]
					ran = append(ran, "stop "+n+" ("+state+")")
					if n == "1" {
						return tc.stop
					}
					return nil
				})
			}
			s.Check(func() error {
				ran = append(ran, "check")
				return tc.check
			})
			return nil
		}}
		if got := suite.run(tc.tests); got != tc.want || !slices.Equal(ran, tc.ran) {
			t.Errorf("%s: code %d, ran %q; want %d, %q", tc.name, got, ran, tc.want, tc.ran)
		}
	}
}
