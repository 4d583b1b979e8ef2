package chaos

import (
	"encoding/gob"
	"fmt"
	"os"
)

// SavedHistory is a run's history as the end checks see it: the client
// operations and what the applied log shows of the owners of those whose
// outcome the client did not learn. For studying the checker offline
// (RunConfig.HistoryFile, the soak's -history).
type SavedHistory struct {
	Ops []Op
	Log map[string]LogOutcome
}

// Outcomes is the saved log's facts (an owner not saved: may have been
// granted, no bounds).
func (h SavedHistory) Outcomes() Outcomes {
	return func(owner string) LogOutcome {
		if o, ok := h.Log[owner]; ok {
			return o
		}
		return LogOutcome{Granted: true}
	}
}

// SaveHistory writes ops and what outcomes shows of the owners of
// undetermined operations to path.
func SaveHistory(path string, ops []Op, outcomes Outcomes) error {
	h := SavedHistory{Ops: ops, Log: map[string]LogOutcome{}}
	for _, op := range ops {
		if op.Outcome != OK && op.Outcome != Locked && outcomes != nil {
			h.Log[op.Owner] = outcomes(op.Owner)
		}
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := gob.NewEncoder(f).Encode(h); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// LoadHistory reads a history SaveHistory wrote.
func LoadHistory(path string) (SavedHistory, error) {
	var h SavedHistory
	f, err := os.Open(path)
	if err != nil {
		return h, err
	}
	defer f.Close()
	err = gob.NewDecoder(f).Decode(&h)
	return h, err
}

// HistoryStats describes the shape of the linearizability check of ops:
// its partitions, the largest one's operations and how many of them never
// return (outcome unknown: the checker may place them anywhere after their
// call, which is what makes a check expensive).
func HistoryStats(ops []Op, outcomes Outcomes) string {
	size, pending := map[string]int{}, map[string]int{}
	for _, p := range ToPorcupineCatalogue(ops, outcomes) {
		k := p.Metadata.(string)
		size[k]++
		if p.Return == never {
			pending[k]++
		}
	}
	largest := ""
	for k, n := range size {
		if largest == "" || n > size[largest] || n == size[largest] && k < largest {
			largest = k
		}
	}
	total := 0
	for _, n := range pending {
		total += n
	}
	return fmt.Sprintf("%d partitions, largest %q: %d operations (%d never return); %d never return in all",
		len(size), largest, size[largest], pending[largest], total)
}
