//go:build race

package node

// raceEnabled: the race detector slows every goroutine several times over.
const raceEnabled = true
