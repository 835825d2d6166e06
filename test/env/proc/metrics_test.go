package proc

import (
	"math"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"
)

// kubeProxy has kube-proxy's first network programming buckets: 0.25, 0.5, 1, 2 s.
func kubeProxy(counts ...float64) Histogram {
	return Histogram{Bounds: []float64{0.25, 0.5, 1, 2, math.Inf(1)}, Counts: counts}
}

func TestQuantile(t *testing.T) {
	nan := math.NaN()
	inf := math.Inf(1)
	for _, tc := range []struct {
		name      string
		h         Histogram
		q         float64
		v, lo, hi float64
		max       float64
	}{
		{"empty", kubeProxy(0, 0, 0, 0, 0), 0.5, nan, nan, nan, nan},
		{"none", Histogram{}, 0.99, nan, nan, nan, nan},
		// 10 observations, all in (0.5, 1]: the median is halfway through that bucket.
		{"one bucket", kubeProxy(0, 0, 10, 10, 10), 0.5, 0.75, 0.5, 1, 1},
		// The first bucket starts at zero.
		{"first bucket", kubeProxy(4, 4, 4, 4, 4), 0.5, 0.125, 0, 0.25, 0.25},
		// Rank 99 of 100: 9 of the 10 observations in (1, 2] are below it.
		{"p99", kubeProxy(50, 80, 90, 100, 100), 0.99, 1.9, 1, 2, 2},
		// A rank past the highest finite bound is that bound.
		{"+Inf bucket", kubeProxy(0, 0, 0, 1, 2), 0.99, 2, 2, inf, inf},
		{"q=0", kubeProxy(0, 0, 3, 3, 3), 0, 0, 0, 0.25, 1},
	} {
		v, lo, hi := tc.h.Quantile(tc.q)
		for _, c := range []struct {
			what      string
			got, want float64
		}{{"value", v, tc.v}, {"lo", lo, tc.lo}, {"hi", hi, tc.hi}, {"max", tc.h.Max(), tc.max}} {
			if !(c.got == c.want || math.IsNaN(c.got) && math.IsNaN(c.want) || math.Abs(c.got-c.want) < 1e-9) {
				t.Errorf("%s: %s = %g, want %g", tc.name, c.what, c.got, c.want)
			}
		}
	}
}

func TestSub(t *testing.T) {
	for _, tc := range []struct {
		name          string
		after, before Histogram
		want          Histogram
		fails         bool
	}{
		{"a phase's own", kubeProxy(5, 7, 9, 9, 10), kubeProxy(2, 2, 3, 3, 3), kubeProxy(3, 5, 6, 6, 7), false},
		{"nothing before", kubeProxy(1, 1, 1, 1, 1), Histogram{}, kubeProxy(1, 1, 1, 1, 1), false},
		{"nothing after", Histogram{}, kubeProxy(1, 1, 1, 1, 1), Histogram{}, true},
		{"other bounds", kubeProxy(1, 1, 1, 1, 1), Histogram{Bounds: []float64{0.1, 0.2, 1, 2, math.Inf(1)}, Counts: []float64{0, 0, 0, 0, 0}}, Histogram{}, true},
	} {
		got, err := tc.after.Sub(tc.before)
		if tc.fails != (err != nil) {
			t.Errorf("%s: error %v, want one: %v", tc.name, err, tc.fails)
			continue
		}
		if !tc.fails && (got.Count() != tc.want.Count() || len(got.Counts) != len(tc.want.Counts)) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
		for i := range tc.want.Counts {
			if !tc.fails && got.Counts[i] != tc.want.Counts[i] {
				t.Errorf("%s: bucket %g has %g, want %g", tc.name, got.Bounds[i], got.Counts[i], tc.want.Counts[i])
			}
		}
	}
}

// TestHistogramOf reads two series of one histogram as one, +Inf bucket from the sample count.
func TestHistogramOf(t *testing.T) {
	series := func(c1, c2, n uint64) *dto.Metric {
		return &dto.Metric{Histogram: &dto.Histogram{SampleCount: proto.Uint64(n), SampleSum: proto.Float64(1), Bucket: []*dto.Bucket{
			{UpperBound: proto.Float64(0.25), CumulativeCount: proto.Uint64(c1)},
			{UpperBound: proto.Float64(0.5), CumulativeCount: proto.Uint64(c2)},
		}}}
	}
	families := []*dto.MetricFamily{
		{Name: proto.String("other"), Type: dto.MetricType_COUNTER.Enum(), Metric: []*dto.Metric{{Counter: &dto.Counter{Value: proto.Float64(3)}}}},
		{Name: proto.String("h"), Type: dto.MetricType_HISTOGRAM.Enum(), Metric: []*dto.Metric{series(1, 2, 3), series(0, 4, 4)}},
	}
	h, err := HistogramOf(families, "h")
	if err != nil {
		t.Fatal(err)
	}
	if want := []float64{1, 6, 7}; len(h.Counts) != 3 || h.Counts[0] != want[0] || h.Counts[1] != want[1] || h.Counts[2] != want[2] ||
		!math.IsInf(h.Bounds[2], 1) || h.Sum != 2 {
		t.Errorf("HistogramOf = %+v, want counts %v and sum 2", h, want)
	}
	if _, err := HistogramOf(families, "other"); err == nil {
		t.Error("a counter read as a histogram")
	}
	if h, err := HistogramOf(families, "missing"); err != nil || h.Count() != 0 {
		t.Errorf("missing histogram: %+v, %v", h, err)
	}
}
