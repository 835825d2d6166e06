package proc

import (
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"sort"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
)

// metricsClient reads a process's metrics on loopback.
var metricsClient = &http.Client{Timeout: 10 * time.Second}

// Scrape reads every metric family a process serves at url, in the protobuf exposition format, which carries
// histograms whole and costs less to decode than text.
func Scrape(url string) ([]*dto.MetricFamily, error) { return ScrapeWith(metricsClient, url) }

// ScrapeWith is Scrape through hc: for a process that only a client of its own reaches, such as one in a network
// namespace of its own.
func ScrapeWith(hc *http.Client, url string) ([]*dto.MetricFamily, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", string(expfmt.NewFormat(expfmt.TypeProtoDelim)))
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	dec := expfmt.NewDecoder(resp.Body, expfmt.ResponseFormat(resp.Header))
	var families []*dto.MetricFamily
	for {
		f := &dto.MetricFamily{}
		err := dec.Decode(f)
		if errors.Is(err, io.EOF) {
			return families, nil
		}
		if err != nil {
			return nil, fmt.Errorf("GET %s: %w", url, err)
		}
		families = append(families, f)
	}
}

// Sum adds up the values of the counters and gauges named name whose labels include want, in families.
func Sum(families []*dto.MetricFamily, name string, want map[string]string) float64 {
	total := 0.0
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	metric:
		for _, m := range f.GetMetric() {
			for k, v := range want {
				found := false
				for _, l := range m.GetLabel() {
					if l.GetName() == k && l.GetValue() == v {
						found = true
					}
				}
				if !found {
					continue metric
				}
			}
			total += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return total
}

// Histogram is a classic Prometheus histogram at one scrape: cumulative counts at ascending upper bounds, the last
// of which is +Inf and counts every observation.
type Histogram struct {
	Bounds []float64
	Counts []float64
	Sum    float64
}

// HistogramOf adds up the histograms named name in families, every series of it, which must share bounds; the
// zero Histogram when there is none, as a process that has observed nothing yet may serve no series.
func HistogramOf(families []*dto.MetricFamily, name string) (Histogram, error) {
	var h Histogram
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			dh := m.GetHistogram()
			if dh == nil {
				return Histogram{}, fmt.Errorf("%s is a %s, not a histogram", name, f.GetType())
			}
			var s Histogram
			for _, b := range dh.GetBucket() {
				if !math.IsInf(b.GetUpperBound(), 1) {
					s.Bounds = append(s.Bounds, b.GetUpperBound())
					s.Counts = append(s.Counts, float64(b.GetCumulativeCount()))
				}
			}
			s.Bounds, s.Counts, s.Sum = append(s.Bounds, math.Inf(1)), append(s.Counts, float64(dh.GetSampleCount())), dh.GetSampleSum()
			if h.Bounds == nil {
				h = s
				continue
			}
			var err error
			if h, err = h.add(s, 1); err != nil {
				return Histogram{}, fmt.Errorf("%s: %w", name, err)
			}
		}
	}
	return h, nil
}

// add returns h plus sign times o, bucket by bucket.
func (h Histogram) add(o Histogram, sign float64) (Histogram, error) {
	if o.Bounds == nil {
		return h, nil
	}
	if h.Bounds == nil {
		h = Histogram{Bounds: o.Bounds, Counts: make([]float64, len(o.Counts))}
	}
	if len(h.Bounds) != len(o.Bounds) {
		return Histogram{}, fmt.Errorf("histograms of %d and %d buckets", len(h.Bounds), len(o.Bounds))
	}
	out := Histogram{Bounds: h.Bounds, Counts: make([]float64, len(h.Counts)), Sum: h.Sum + sign*o.Sum}
	for i := range h.Counts {
		if h.Bounds[i] != o.Bounds[i] {
			return Histogram{}, fmt.Errorf("histograms with bounds %g and %g", h.Bounds[i], o.Bounds[i])
		}
		out.Counts[i] = h.Counts[i] + sign*o.Counts[i]
	}
	return out, nil
}

// Sub returns the observations h has that before, an earlier scrape of the same histogram, had not: those of the
// time between the two scrapes. A count that fell means the process restarted in between, and fails.
func (h Histogram) Sub(before Histogram) (Histogram, error) {
	d, err := h.add(before, -1)
	if err != nil {
		return Histogram{}, err
	}
	for i, c := range d.Counts {
		if c < 0 {
			return Histogram{}, fmt.Errorf("bucket %g fell from %g to %g: not the same process", d.Bounds[i], before.Counts[i], before.Counts[i]+c)
		}
	}
	return d, nil
}

// Count is the number of observations.
func (h Histogram) Count() float64 {
	if len(h.Counts) == 0 {
		return 0
	}
	return h.Counts[len(h.Counts)-1]
}

// Quantile estimates the q-quantile (0 ≤ q ≤ 1) as Prometheus's histogram_quantile does: it finds the bucket that
// holds the rank and interpolates linearly within it, the first bucket starting at zero; a rank in the +Inf bucket
// is the highest finite bound. It also returns the bucket's bounds, the estimate's resolution (hi is +Inf for the
// last bucket). It returns NaN without observations.
func (h Histogram) Quantile(q float64) (v, lo, hi float64) {
	n := h.Count()
	if n == 0 || q < 0 || q > 1 {
		return math.NaN(), math.NaN(), math.NaN()
	}
	rank := q * n
	b := sort.Search(len(h.Counts), func(i int) bool { return h.Counts[i] >= rank })
	if b == len(h.Counts)-1 {
		if b == 0 {
			return math.NaN(), 0, math.Inf(1)
		}
		return h.Bounds[b-1], h.Bounds[b-1], math.Inf(1)
	}
	below := 0.0
	if b > 0 {
		lo, below = h.Bounds[b-1], h.Counts[b-1]
	}
	hi = h.Bounds[b]
	in := h.Counts[b] - below
	if in == 0 { // q = 0 below the first observation
		return lo, lo, hi
	}
	return lo + (hi-lo)*(rank-below)/in, lo, hi
}

// Max is the upper bound of the highest bucket that holds an observation: no observation exceeded it. NaN without
// observations.
func (h Histogram) Max() float64 {
	for i := range h.Counts {
		if h.Counts[i] == h.Count() && h.Count() > 0 {
			return h.Bounds[i]
		}
	}
	return math.NaN()
}
