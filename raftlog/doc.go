// Package raftlog is lockraft's raft log: a [raft.Storage] with durable writes, behind the
// [Log] interface, in two engines with identical semantics:
//   - [WAL] (wal.go, segment.go, record.go, walstate.go): an append-only, segmented
//     write-ahead log in a directory. Each write method appends its records with one
//     write and one fdatasync; every entry after the compaction point is in memory.
//     Segments ("<seq>-<first index>.wal", defaultSegmentSize) each start with a state
//     record, so Compact deletes whole segments below the compaction point. On open a
//     torn tail (a crash mid-write) is cut off; any other damage is errCorrupt.
//   - [Storage] (open.go, read.go, write.go): a bbolt file, described below.
//
// The rest of this comment describes Storage; WAL follows the same rules.
//
// It stores the entries, the HardState, the latest ConfState and the metadata of the
// latest snapshot. The node's appender writes through [Storage.Save] once per group of Readys; raft reads
// through the raft.Storage methods. Semantics follow raft's MemoryStorage exactly
// (including the conceptual "dummy" entry at FirstIndex()-1 whose term is kept for
// matching), with three differences:
//   - everything is durable: each write method is one bbolt read-write transaction,
//     i.e. one commit and one fsync pair, whatever the number of entries;
//   - caller mistakes that make MemoryStorage panic (an index past LastIndex, a gap in
//     appended entries) are returned as errors instead;
//   - [Storage.SetConfState] records the ConfState of the latest applied conf change
//     with its index, which [Storage.InitialState] prefers over the snapshot's;
//     [Storage.ConfIndex] tells the node which re-delivered conf changes that
//     ConfState already holds (see [Log]).
//
// # File layout
//
// Bucket "log" maps an 8-byte big-endian index to proto.Marshal(entry). It holds exactly
// the entries FirstIndex()..LastIndex(). Bucket "meta" holds:
//
//	magic      "lockraft/raftlog" + format version; a file without it is not ours (errCorrupt)
//	hardstate  proto HardState (absent until the first one is saved)
//	confstate  proto ConfState from SetConfState, then its index as field 1000 (confstate.go);
//	           absent if never set or superseded by a snapshot
//	snapshot   proto Snapshot: metadata and Data (a small descriptor in lockraft's design)
//	compacted  16 bytes: index and term of the entry just before FirstIndex
//
// # Memory
//
// The newest Options.CacheEntries entries are kept in memory, so raft's Entries and Term
// calls on the tail never open a transaction. Older entries are read from the file.
//
// # Concurrency and errors
//
// All methods are safe for concurrent use; a mutex serialises them. Returned slices and
// messages are owned by the caller; entries inside them must not be mutated (raft's
// contract). An error wrapping errWrite means the file may not hold what raft believes
// is durable: the caller must stop the node. Memory always mirrors the last successful
// commit, so reads stay consistent with the file after a failed write.
package raftlog
