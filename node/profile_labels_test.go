package node

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"runtime/pprof"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"google.golang.org/protobuf/encoding/protowire"
)

// cpuByLabel sums, from a CPU profile written by runtime/pprof
// (gzip-compressed profile.proto), the CPU time of the samples per value of
// the label key. Only the fields it needs are read: Profile.sample (2),
// Profile.string_table (6), Sample.value (2; the second value of a CPU
// profile is nanoseconds), Sample.label (3: key and str as string indices).
func cpuByLabel(prof []byte, key string) (map[string]time.Duration, error) {
	zr, err := gzip.NewReader(bytes.NewReader(prof))
	if err != nil {
		return nil, err
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		return nil, err
	}
	type sample struct {
		ns     int64
		labels [][2]int64 // (key, str) string indices
	}
	var samples []sample
	var strs []string
	err = eachField(raw, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		switch {
		case num == 2 && typ == protowire.BytesType:
			var s sample
			var values []int64
			err := eachField(v, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
				switch {
				case num == 2 && typ == protowire.BytesType: // packed values
					for len(v) > 0 {
						u, n := protowire.ConsumeVarint(v)
						if n < 0 {
							return fmt.Errorf("bad packed value")
						}
						values = append(values, int64(u))
						v = v[n:]
					}
				case num == 2 && typ == protowire.VarintType:
					values = append(values, int64(x))
				case num == 3 && typ == protowire.BytesType:
					var kv [2]int64
					err := eachField(v, func(num protowire.Number, typ protowire.Type, _ []byte, x uint64) error {
						if typ == protowire.VarintType && (num == 1 || num == 2) {
							kv[num-1] = int64(x)
						}
						return nil
					})
					if err != nil {
						return err
					}
					s.labels = append(s.labels, kv)
				}
				return nil
			})
			if err != nil {
				return err
			}
			if len(values) >= 2 {
				s.ns = values[1]
			}
			samples = append(samples, s)
		case num == 6 && typ == protowire.BytesType:
			strs = append(strs, string(v))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	str := func(i int64) string {
		if i < 0 || int(i) >= len(strs) {
			return ""
		}
		return strs[i]
	}
	out := map[string]time.Duration{}
	for _, s := range samples {
		val := ""
		for _, kv := range s.labels {
			if str(kv[0]) == key {
				val = str(kv[1])
			}
		}
		out[val] += time.Duration(s.ns)
	}
	return out, nil
}

// eachField calls f for every top-level field of a protobuf message: v is
// the payload of a length-delimited field, x the value of a varint field.
func eachField(b []byte, f func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("bad tag")
		}
		b = b[n:]
		var v []byte
		var x uint64
		switch typ {
		case protowire.VarintType:
			x, n = protowire.ConsumeVarint(b)
		case protowire.BytesType:
			v, n = protowire.ConsumeBytes(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return fmt.Errorf("bad field %d", num)
		}
		b = b[n:]
		if err := f(num, typ, v, x); err != nil {
			return err
		}
	}
	return nil
}

// TestCPUByLabel: CPU burnt in goroutines labelled as two nodes is told
// apart, including goroutines that inherit the label (as a node's do from
// Start). BenchmarkLeaderCPUPerThousandOps relies on it.
func TestCPUByLabel(t *testing.T) {
	var buf bytes.Buffer
	if err := pprof.StartCPUProfile(&buf); err != nil {
		t.Skipf("CPU profile unavailable: %v", err)
	}
	burn := func(label string, d time.Duration, done chan<- struct{}) {
		pprof.Do(context.Background(), pprof.Labels(profileLabel, label), func(context.Context) {
			go func() { // inherits the label, as a node's goroutines do
				x := 0
				for end := time.Now().Add(d); time.Now().Before(end); {
					x++
				}
				_ = x
				done <- struct{}{}
			}()
		})
	}
	done := make(chan struct{}, 2)
	burn("a", 400*time.Millisecond, done)
	burn("b", 100*time.Millisecond, done)
	<-done
	<-done
	pprof.StopCPUProfile()
	byLabel, err := cpuByLabel(buf.Bytes(), profileLabel)
	require.NoError(t, err)
	t.Logf("cpu by label: %v", byLabel)
	require.Greater(t, byLabel["a"], time.Duration(0))
	require.Greater(t, byLabel["b"], time.Duration(0))
	require.Greater(t, byLabel["a"], byLabel["b"], "a burnt four times as long as b")
	_, err = cpuByLabel([]byte("not a profile"), profileLabel)
	require.Error(t, err)
}
