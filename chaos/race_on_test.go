//go:build race

package chaos

// raceEnabled: the race detector randomises goroutine scheduling, so a
// simulation under it is a valid run but not a replay.
const raceEnabled = true
