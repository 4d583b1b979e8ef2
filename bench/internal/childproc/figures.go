package childproc

import (
	"math"
	"slices"
)

// Median is the median of f over rs (the upper one of an even count); rs
// must not be empty.
func Median[T any](rs []T, f func(T) float64) float64 {
	v := make([]float64, len(rs))
	for i, r := range rs {
		v[i] = f(r)
	}
	slices.Sort(v)
	return v[len(v)/2]
}

// MaxOf is the largest f over rs (−Inf for none).
func MaxOf[T any](rs []T, f func(T) float64) float64 {
	m := math.Inf(-1)
	for _, r := range rs {
		m = max(m, f(r))
	}
	return m
}
