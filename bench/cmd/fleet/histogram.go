package main

import (
	"bufio"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// histogram is a Prometheus histogram as its text exposition gives it: the
// cumulative count at or below each bucket's upper bound ("le"), by bound.
type histogram map[float64]uint64

// parseHistogram reads the histogram name (without a label other than le)
// from a /metrics page in Prometheus's text format.
func parseHistogram(page, name string) (histogram, error) {
	h := histogram{}
	prefix := name + `_bucket{le="`
	sc := bufio.NewScanner(strings.NewReader(page))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), prefix)
		if !ok {
			continue
		}
		le, value, ok := strings.Cut(rest, `"} `)
		if !ok {
			return nil, fmt.Errorf("%s: bad bucket line %q", name, sc.Text())
		}
		bound, err := strconv.ParseFloat(le, 64) // "+Inf" parses as +Inf
		if err != nil {
			return nil, fmt.Errorf("%s: bucket bound %q: %w", name, le, err)
		}
		f, err := strconv.ParseFloat(strings.Fields(value)[0], 64)
		if err != nil {
			return nil, fmt.Errorf("%s: bucket count %q: %w", name, value, err)
		}
		h[bound] = uint64(f)
	}
	if len(h) == 0 {
		return nil, fmt.Errorf("no histogram %s in the page", name)
	}
	return h, sc.Err()
}

// sub is what h counted since old, an earlier reading of the same
// histogram.
func (h histogram) sub(old histogram) histogram {
	d := histogram{}
	for le, n := range h {
		d[le] = n - min(n, old[le])
	}
	return d
}

// add adds o's counts to h's.
func (h histogram) add(o histogram) {
	for le, n := range o {
		h[le] += n
	}
}

// count is the number of observations.
func (h histogram) count() uint64 { return h[math.Inf(1)] }

// quantile is the upper bound of the bucket holding quantile q: the
// observation is at most that (+Inf: beyond the last finite bound; 0: no
// observations).
func (h histogram) quantile(q float64) float64 {
	n := h.count()
	if n == 0 {
		return 0
	}
	want := uint64(math.Ceil(q * float64(n)))
	bounds := make([]float64, 0, len(h))
	for le := range h {
		bounds = append(bounds, le)
	}
	slices.Sort(bounds)
	for _, le := range bounds {
		if h[le] >= want {
			return le
		}
	}
	return math.Inf(1)
}

// bucketText writes a bucket bound in seconds as "≤ 4ms" (or "> 65.536s"
// for the unbounded bucket, given the last finite bound).
func bucketText(h histogram, le float64) string {
	if h.count() == 0 {
		return "no samples"
	}
	if math.IsInf(le, 1) {
		last := 0.0
		for b := range h {
			if !math.IsInf(b, 1) {
				last = max(last, b)
			}
		}
		return "> " + seconds(last).String()
	}
	return "≤ " + seconds(le).String()
}

// seconds converts a bound in seconds to a duration.
func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
