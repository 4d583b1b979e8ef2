package membership

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/hashicorp/memberlist"
)

// maxMetaSize is memberlist's limit on a member's metadata, in bytes.
const maxMetaSize = memberlist.MetaMaxSize

// metaVersion is the first byte of every encoded Meta. A decoder rejects
// other versions; fields added within a version are appended, and decoders
// ignore trailing bytes, so a newer writer stays readable by an older reader.
const metaVersion byte = 1

const (
	flagHasData byte = 1 << iota
	flagLeaving      // set by Leave just before leaving gossip: "this is graceful"
)

// errMetaTooLarge is returned when a Meta encodes to more than maxMetaSize bytes.
var errMetaTooLarge = errors.New("membership: metadata larger than 512 bytes")

// errInvalidMeta is returned for a Meta that is not usable (zero RaftID, empty
// RaftAddr or ClusterID) or, from UpdateMeta, one that changes RaftID or
// ClusterID.
var errInvalidMeta = errors.New("membership: invalid metadata")

// Meta is what a member tells the others about itself.
type Meta struct {
	RaftID    uint64 // non-zero, random, persisted, never reused
	RaftAddr  string // gRPC address of the raft transport, "host:port"
	ClusterID string // cluster identity; members of other clusters are ignored
	Version   string // software version, informational
	HasData   bool   // the member has raft state on disk (it must never bootstrap)
	// Formation identifies the formed cluster the member belongs to: a random
	// id made when that cluster was bootstrapped, "" for a member that has
	// not joined one yet. Two members with different non-empty Formations
	// are of two clusters, even with the same ClusterID: they never exchange
	// raft traffic and never change each other's membership.
	Formation string
}

func (m Meta) validate() error {
	switch {
	case m.RaftID == 0:
		return fmt.Errorf("%w: RaftID is zero", errInvalidMeta)
	case m.RaftAddr == "":
		return fmt.Errorf("%w: RaftAddr is empty", errInvalidMeta)
	case m.ClusterID == "":
		return fmt.Errorf("%w: ClusterID is empty", errInvalidMeta)
	}
	return nil
}

// encode lays Meta out as: version byte, flags byte, uvarint RaftID, then
// RaftAddr, ClusterID, Version and Formation each as uvarint length + bytes.
// Formation was appended within version 1: a reader that does not know it
// ignores it, and a writer that does not know it reads as Formation "".
func (m Meta) encode(leaving bool) ([]byte, error) {
	b := make([]byte, 0, 2+binary.MaxVarintLen64+4*binary.MaxVarintLen16+len(m.RaftAddr)+len(m.ClusterID)+len(m.Version)+len(m.Formation))
	var flags byte
	if m.HasData {
		flags |= flagHasData
	}
	if leaving {
		flags |= flagLeaving
	}
	b = append(b, metaVersion, flags)
	b = binary.AppendUvarint(b, m.RaftID)
	for _, s := range []string{m.RaftAddr, m.ClusterID, m.Version, m.Formation} {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	if len(b) > maxMetaSize {
		return nil, fmt.Errorf("%w: %d bytes", errMetaTooLarge, len(b))
	}
	return b, nil
}

// decodeMeta is the inverse of encode. It never panics on any input.
func decodeMeta(b []byte) (m Meta, leaving bool, err error) {
	if len(b) < 2 {
		return Meta{}, false, fmt.Errorf("metadata too short (%d bytes)", len(b))
	}
	if b[0] != metaVersion {
		return Meta{}, false, fmt.Errorf("unknown metadata version %d", b[0])
	}
	flags := b[1]
	b = b[2:]
	id, n := binary.Uvarint(b)
	if n <= 0 {
		return Meta{}, false, errors.New("metadata: bad raft id")
	}
	b = b[n:]
	var strs [3]string
	for i := range strs {
		l, n := binary.Uvarint(b)
		if n <= 0 || l > uint64(len(b)-n) {
			return Meta{}, false, fmt.Errorf("metadata: bad string %d", i)
		}
		strs[i] = string(b[n : n+int(l)])
		b = b[n+int(l):]
	}
	m = Meta{RaftID: id, RaftAddr: strs[0], ClusterID: strs[1], Version: strs[2], HasData: flags&flagHasData != 0}
	// Formation, appended later in version 1: absent in an older writer's
	// metadata.
	if len(b) > 0 {
		l, n := binary.Uvarint(b)
		if n <= 0 || l > uint64(len(b)-n) {
			return Meta{}, false, errors.New("metadata: bad formation")
		}
		m.Formation = string(b[n : n+int(l)])
	}
	if err := m.validate(); err != nil {
		return Meta{}, false, err
	}
	return m, flags&flagLeaving != 0, nil
}
