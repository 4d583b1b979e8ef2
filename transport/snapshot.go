package transport

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/lockraft/lockraft/transport/transportpb"
)

// Snapshot transfer
//
// The sender streams, over one Snapshot RPC: a first chunk with the marshalled
// MsgSnap and the file size, the file in chunks of snapshotChunkSize, and a
// last chunk with the SHA-256 of the file. The receiver writes the chunks to
// a temporary file in SnapshotDir, checks size and checksum, fsyncs, renames
// it to SnapshotPath(dir, index), fsyncs the directory, and only then
// delivers the MsgSnap to Handler.Receive and acknowledges. Any failure
// removes the temporary file, delivers nothing and fails the RPC, which the
// sender reports with Handler.ReportSnapshot(to, true).

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
				p.t.log.Warn("transport: snapshot send failed", "peer", p.id,
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
	m := &raftpb.Message{}
	if err := proto.Unmarshal(c.GetMessage(), m); err != nil {
		return status.Errorf(codes.InvalidArgument, "snapshot message: %v", err)
	}
	if m.GetType() != raftpb.MessageType_MsgSnap || m.GetTo() != s.t.cfg.LocalID ||
		m.GetFrom() != from || m.GetSnapshot().GetMetadata() == nil {
		return status.Errorf(codes.InvalidArgument, "not a MsgSnap from %d to %d: type %v from %d to %d",
			from, s.t.cfg.LocalID, m.GetType(), m.GetFrom(), m.GetTo())
	}
	index := m.GetSnapshot().GetMetadata().GetIndex()
	if err := s.receiveFile(stream, c, index); err != nil {
		s.t.log.Warn("transport: snapshot rejected", "from", from, "index", index, "err", err)
		if errors.Is(err, ErrSnapshotChecksum) {
			return status.Error(codes.DataLoss, err.Error())
		}
		if _, ok := status.FromError(err); ok {
			return err
		}
		return status.Error(codes.Internal, err.Error())
	}
	s.t.cfg.Handler.Receive([]*raftpb.Message{m})
	return stream.SendAndClose(&transportpb.SnapshotAck{})
}

// receiveFile writes the chunks, starting with c, to a temporary file and
// moves it to SnapshotPath(dir, index) once size and checksum match.
func (s *server) receiveFile(stream transportpb.Raft_SnapshotServer, c *transportpb.SnapshotChunk, index uint64) (err error) {
	dir := s.t.cfg.SnapshotDir
	f, err := os.CreateTemp(dir, fmt.Sprintf("%016x.snap.tmp-*", index))
	if err != nil {
		return err
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
	want := c.GetSize()
	sum := sha256.New()
	var got uint64
	for {
		got += uint64(len(c.GetData()))
		if got > want {
			return fmt.Errorf("%w: more than the announced %d bytes", ErrSnapshotChecksum, want)
		}
		if _, err := f.Write(c.GetData()); err != nil {
			return err
		}
		sum.Write(c.GetData())
		if c.GetLast() {
			break
		}
		if c, err = stream.Recv(); err != nil {
			if errors.Is(err, io.EOF) {
				return status.Error(codes.InvalidArgument, "snapshot stream ended before the last chunk")
			}
			return err
		}
	}
	if got != want || !bytes.Equal(sum.Sum(nil), c.GetSha256()) {
		return fmt.Errorf("%w: %d of %d bytes", ErrSnapshotChecksum, got, want)
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		f = nil
		return err
	}
	f = nil
	if err := os.Rename(tmp, SnapshotPath(dir, index)); err != nil {
		return err
	}
	return syncDir(dir)
}

// syncDir fsyncs a directory so that a rename in it is durable.
func syncDir(dir string) error {
	d, err := os.Open(filepath.Clean(dir))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
