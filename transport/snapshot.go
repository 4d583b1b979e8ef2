package transport

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/lockraft/lockraft/internal/netrules"
	"github.com/lockraft/lockraft/internal/views"
	"github.com/lockraft/lockraft/transport/transportpb"
)

// Snapshot transfer
//
// The sender streams, over one Snapshot RPC: a first chunk with the marshalled
// MsgSnap and the file size, the file in chunks of snapshotChunkSize, and a
// last chunk with the SHA-256 of the file.
//
// The receiver checks the first chunk before writing anything
// (checkSnapshotHeader: a MsgSnap from the authenticated sender to this
// node, of at most MaxSnapshotSize bytes) and asks the node
// (Handler.AcceptSnapshot: from the current leader, a sane snapshot). It
// receives one snapshot at a time (another is refused with
// ResourceExhausted). It writes the chunks to a temporary file of its own in
// SnapshotDir (a random name per transfer), checks size and checksum as they
// come (chunkReceiver), fsyncs, and hands the MsgSnap and the file to the
// node (Handler.ReceiveSnapshot), which renames the file to
// SnapshotPath(dir, index) only once raft has accepted the snapshot and
// removes it otherwise. Only then is the transfer acknowledged: a snapshot
// the node could not take is a failed RPC, reported by the sender with
// Handler.ReportSnapshot(to, true). Any failure removes the temporary file;
// files left by a crash are removed when the Transport starts.

// snapshotLoop sends the peer's MsgSnap one at a time, off the message
// stream, and reports each outcome.
func (p *peer) snapshotLoop() {
	defer p.wg.Done()
	for {
		select {
		case <-p.ctx.Done():
			return // queued snapshots are abandoned with the peer
		case m := <-p.snaps:
			err := p.sendSnapshot(m)
			if p.ctx.Err() != nil {
				return
			}
			if err != nil {
				p.t.log.Warn("transport: snapshot send failed", "peer", views.MemberID(p.id),
					"index", m.GetSnapshot().GetMetadata().GetIndex(), "err", err)
			}
			p.t.cfg.Handler.ReportSnapshot(p.id, err != nil)
		}
	}
}

// sendSnapshot streams m and its file to the peer and waits for the
// receiver's acknowledgement.
func (p *peer) sendSnapshot(m *raftpb.Message) error {
	index := m.GetSnapshot().GetMetadata().GetIndex()
	f, err := os.Open(SnapshotPath(p.t.cfg.SnapshotDir, index))
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	raw, err := proto.Marshal(m)
	if err != nil {
		return err
	}
	stream, err := p.rpc.Snapshot(p.outgoing(p.ctx))
	if err != nil {
		return err
	}
	defer func() { _ = stream.CloseSend() }()
	size := fi.Size()
	sum := sha256.New()
	chunk := &transportpb.SnapshotChunk{Message: raw, Size: uint64(size)}
	buf := make([]byte, snapshotChunkSize)
	r := io.LimitReader(f, size)
	var sent int64
	for {
		n, rerr := io.ReadFull(r, buf)
		if n > 0 {
			data := buf[:n]
			sum.Write(data)
			sent += int64(n)
			if hook := p.t.snapshotChunkHook; hook != nil {
				data = bytes.Clone(data)
				hook(data)
			}
			chunk.Data = data
			if err := stream.Send(chunk); err != nil {
				return closeErr(stream, err)
			}
			chunk = &transportpb.SnapshotChunk{}
		}
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			break
		}
		if rerr != nil {
			return rerr
		}
	}
	if sent != size {
		return fmt.Errorf("snapshot file %d shrank while sending: %d of %d bytes", index, sent, size)
	}
	chunk.Last = true
	chunk.Sha256 = sum.Sum(nil)
	if err := stream.Send(chunk); err != nil {
		return closeErr(stream, err)
	}
	_, err = stream.CloseAndRecv()
	return err
}

// closeErr turns io.EOF from Send (the server ended the RPC) into the
// server's status.
func closeErr(stream transportpb.Raft_SnapshotClient, err error) error {
	if errors.Is(err, io.EOF) {
		_, err = stream.CloseAndRecv()
	}
	return err
}

// Snapshot receives one MsgSnap with its file; see the section comment above.
func (s *server) Snapshot(stream transportpb.Raft_SnapshotServer) error {
	from, err := s.authenticate(stream.Context(), "Snapshot")
	if err != nil {
		return err
	}
	c, err := stream.Recv()
	if err != nil {
		return err
	}
	src := views.MemberID(from).String()
	m, err := checkSnapshotHeader(c, s.t.cfg.LocalID, from, s.t.cfg.MaxSnapshotSize)
	if err == nil {
		err = s.t.cfg.Handler.AcceptSnapshot(from, m)
	}
	if err != nil {
		if errors.Is(err, ErrPermissionDenied) || errors.Is(err, errBadHeader) {
			s.t.refused.Refuse(refusedSnapshot, src, "reason", "refused before transfer", "err", err)
		} else {
			s.t.refused.Note(refusedSnapshot, src, "reason", "not now", "err", err)
		}
		return status.Errorf(codes.PermissionDenied, "snapshot refused: %v", err)
	}
	select {
	case s.t.snapSem <- struct{}{}:
		defer func() { <-s.t.snapSem }()
	default:
		s.t.refused.Refuse(refusedSnapshot, src, "reason", "another snapshot is being received")
		return status.Error(codes.ResourceExhausted, "another snapshot is being received")
	}
	index := m.GetSnapshot().GetMetadata().GetIndex()
	tmp, err := s.receiveFile(stream, c, index)
	if err != nil {
		s.t.refused.Refuse(refusedSnapshot, src, "reason", "transfer failed", "index", index, "err", err)
		if errors.Is(err, errSnapshotChecksum) {
			return status.Error(codes.DataLoss, err.Error())
		}
		if _, ok := status.FromError(err); ok {
			return err
		}
		return status.Error(codes.Internal, err.Error())
	}
	if err := s.t.cfg.Handler.ReceiveSnapshot(stream.Context(), m, tmp); err != nil {
		_ = os.Remove(tmp)
		return status.Errorf(codes.Unavailable, "snapshot not taken: %v", err)
	}
	return stream.SendAndClose(&transportpb.SnapshotAck{})
}

// checkSnapshotHeader decodes and checks the first chunk of a transfer from
// from to local: a MsgSnap with metadata, between these two nodes, announcing
// a file of at most max bytes. Nothing is written before it passes.
func checkSnapshotHeader(c *transportpb.SnapshotChunk, local, from uint64, max int64) (*raftpb.Message, error) {
	m := &raftpb.Message{}
	if err := proto.Unmarshal(c.GetMessage(), m); err != nil {
		return nil, fmt.Errorf("%w: snapshot message: %v", errBadHeader, err)
	}
	switch {
	case m.GetType() != raftpb.MessageType_MsgSnap || m.GetTo() != local || m.GetFrom() != from ||
		m.GetSnapshot().GetMetadata() == nil:
		return nil, fmt.Errorf("%w: not a MsgSnap from %016x to %016x: type %v from %016x to %016x",
			errBadHeader, from, local, m.GetType(), m.GetFrom(), m.GetTo())
	case len(m.GetEntries()) > 0 || len(m.GetResponses()) > 0:
		return nil, fmt.Errorf("%w: MsgSnap with entries or responses", errBadHeader)
	case m.GetSnapshot().GetMetadata().GetIndex() == 0:
		return nil, fmt.Errorf("%w: snapshot of index 0", errBadHeader)
	case c.GetSize() > uint64(max):
		return nil, fmt.Errorf("%w: snapshot of %d bytes is over the limit of %d", errBadHeader, c.GetSize(), max)
	}
	return m, nil
}

// errBadHeader: a first chunk no correct sender makes.
var errBadHeader = errors.New("bad snapshot header")

// chunkReceiver checks a transfer's chunks as they come: never more bytes
// than announced, and on the last chunk the exact size and SHA-256.
type chunkReceiver struct {
	want, got uint64
	sum       hash.Hash
}

func newChunkReceiver(size uint64) *chunkReceiver {
	return &chunkReceiver{want: size, sum: sha256.New()}
}

// add takes one chunk: it returns the data to write and whether this was the
// last chunk (then checked whole), or an error wrapping errSnapshotChecksum.
func (r *chunkReceiver) add(c *transportpb.SnapshotChunk) ([]byte, bool, error) {
	d := c.GetData()
	if uint64(len(d)) > r.want-r.got {
		return nil, false, fmt.Errorf("%w: more than the announced %d bytes", errSnapshotChecksum, r.want)
	}
	r.got += uint64(len(d))
	r.sum.Write(d)
	if !c.GetLast() {
		return d, false, nil
	}
	if r.got != r.want || !bytes.Equal(r.sum.Sum(nil), c.GetSha256()) {
		return nil, true, fmt.Errorf("%w: %d of %d bytes", errSnapshotChecksum, r.got, r.want)
	}
	return d, true, nil
}

// receiveFile writes the chunks, starting with c, to a temporary file of
// this transfer and returns its name once size and checksum match and it is
// synced. On error the file is removed.
func (s *server) receiveFile(stream transportpb.Raft_SnapshotServer, c *transportpb.SnapshotChunk, index uint64) (_ string, err error) {
	dir := s.t.cfg.SnapshotDir
	f, err := os.CreateTemp(dir, netrules.SnapshotTempPattern(index))
	if err != nil {
		return "", err
	}
	tmp := f.Name()
	defer func() {
		if f != nil {
			_ = f.Close()
		}
		if err != nil {
			_ = os.Remove(tmp)
		}
	}()
	r := newChunkReceiver(c.GetSize())
	for {
		data, last, err := r.add(c)
		if err != nil {
			return "", err
		}
		if _, err := f.Write(data); err != nil {
			return "", err
		}
		if last {
			break
		}
		if c, err = stream.Recv(); err != nil {
			if errors.Is(err, io.EOF) {
				return "", status.Error(codes.InvalidArgument, "snapshot stream ended before the last chunk")
			}
			return "", err
		}
	}
	if err := f.Sync(); err != nil {
		return "", err
	}
	if err := f.Close(); err != nil {
		f = nil
		return "", err
	}
	f = nil
	return tmp, nil
}
