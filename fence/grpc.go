package fence

import (
	"context"
	"errors"
	"strconv"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Metadata keys (gRPC) and header names (HTTP) that carry a token.
const (
	MetadataResource = "lockraft-fence-resource"
	MetadataToken    = "lockraft-fence-token"
	// StaleReason is the ErrorInfo reason of a stale-token status.
	StaleReason = "STALE_FENCING_TOKEN"
	// ErrorDomain is the ErrorInfo domain of a stale-token status.
	ErrorDomain = "fence.lockraft"
)

// StaleStatus is the gRPC status a stale token gets: codes.Aborted, with an
// errdetails.ErrorInfo (reason StaleReason, metadata resource, token,
// highest). Aborted, not FailedPrecondition: gRPC's code guide keeps
// Aborted for a failed client-specified test-and-set whose read-modify-write
// sequence must be restarted at a higher level, which is exactly what a
// holder whose lock was lost must do (take the lock again, get a new
// token, re-read); FailedPrecondition means "do not retry until the system's
// state is fixed by someone", and nothing needs fixing. Retrying the same
// call with the same token can never succeed, and neither code is retried
// by gRPC's default retry policy.
func StaleStatus(e *StaleError) *status.Status {
	st := status.New(codes.Aborted, e.Error())
	if d, err := st.WithDetails(&errdetails.ErrorInfo{Reason: StaleReason, Domain: ErrorDomain, Metadata: map[string]string{
		"resource": e.Resource, "token": strconv.FormatUint(e.Token, 10), "highest": strconv.FormatUint(e.Highest, 10),
	}}); err == nil {
		return d
	}
	return st
}

// staleRPCError is a stale-token status on the client side: errors.Is(err,
// ErrStaleToken) holds and status.FromError still finds the status.
type staleRPCError struct {
	*StaleError
	st *status.Status
}

func (e *staleRPCError) GRPCStatus() *status.Status { return e.st }
func (e *staleRPCError) Unwrap() error              { return e.StaleError }

// fromStatus turns a stale-token status back into an error that matches
// ErrStaleToken; any other error is returned as is.
func fromStatus(err error) error {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.Aborted {
		return err
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetReason() == StaleReason && info.GetDomain() == ErrorDomain {
			tok, _ := strconv.ParseUint(info.GetMetadata()["token"], 10, 64)
			hi, _ := strconv.ParseUint(info.GetMetadata()["highest"], 10, 64)
			return &staleRPCError{&StaleError{Resource: info.GetMetadata()["resource"], Token: tok, Highest: hi}, st}
		}
	}
	return err
}

func outgoing(ctx context.Context) context.Context {
	res, tok, ok := TokenFromContext(ctx)
	if !ok {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, MetadataResource, res, MetadataToken, strconv.FormatUint(tok, 10))
}

// UnaryClientInterceptor sends the token WithToken put into a call's
// context as metadata, and turns a stale-token status into an error that
// matches ErrStaleToken (status.FromError still works on it). Calls without
// a token pass unchanged.
func UnaryClientInterceptor() grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		return fromStatus(invoker(outgoing(ctx), method, req, reply, cc, opts...))
	}
}

// StreamClientInterceptor is UnaryClientInterceptor for streams: the token
// goes with the stream's headers; a stale stream fails at its first
// receive with an error matching ErrStaleToken.
func StreamClientInterceptor() grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		s, err := streamer(outgoing(ctx), desc, cc, method, opts...)
		if err != nil {
			return nil, fromStatus(err)
		}
		return &clientStream{s}, nil
	}
}

type clientStream struct{ grpc.ClientStream }

func (s *clientStream) RecvMsg(m any) error { return fromStatus(s.ClientStream.RecvMsg(m)) }

// ServerOption configures the server interceptors and Middleware.
type ServerOption func(*serverConfig)

type serverConfig struct{ optional bool }

// OptionalToken lets requests without a token through unfenced (default:
// refused, gRPC InvalidArgument / HTTP 400). A request with a malformed
// token is refused either way.
func OptionalToken() ServerOption { return func(c *serverConfig) { c.optional = true } }

func newServerConfig(opts []ServerOption) serverConfig {
	var c serverConfig
	for _, o := range opts {
		o(&c)
	}
	return c
}

// incoming reads the token from a call's metadata; ok is false when the
// call carries none.
func incoming(ctx context.Context) (resource string, token uint64, ok bool, err error) {
	md, _ := metadata.FromIncomingContext(ctx)
	res, toks := md.Get(MetadataResource), md.Get(MetadataToken)
	if len(res) == 0 && len(toks) == 0 {
		return "", 0, false, nil
	}
	if len(res) != 1 || len(toks) != 1 || res[0] == "" {
		return "", 0, true, ErrMissingToken
	}
	token, perr := strconv.ParseUint(toks[0], 10, 64)
	if perr != nil || token == 0 {
		return "", 0, true, ErrMissingToken
	}
	return res[0], token, true, nil
}

// admitStatus maps an Admit error to the status the caller gets.
func admitStatus(err error) error {
	var se *StaleError
	switch {
	case errors.As(err, &se):
		return StaleStatus(se).Err()
	case errors.Is(err, ErrMissingToken), errors.Is(err, ErrInvalid):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	}
	return status.Error(codes.Unavailable, "fence: "+err.Error())
}

// admit runs the common part of both server interceptors; run is the
// handler. A finish error (a failed commit) replaces a nil handler error:
// the handler's work is not known to be durable.
func admit(ctx context.Context, store Store, cfg serverConfig, run func(context.Context) error) error {
	res, tok, ok, err := incoming(ctx)
	if err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	if !ok {
		if cfg.optional {
			return run(ctx)
		}
		return status.Error(codes.InvalidArgument, ErrMissingToken.Error()+": send "+MetadataResource+" and "+MetadataToken)
	}
	hctx, finish, err := store.Admit(ctx, res, tok)
	if err != nil {
		return admitStatus(err)
	}
	herr := run(hctx)
	if ferr := finish(herr); ferr != nil && herr == nil {
		return status.Error(codes.Unavailable, "fence: handler's work not committed (outcome unknown): "+ferr.Error())
	}
	return herr
}

// UnaryServerInterceptor admits each call through store (see Store): a
// stale token is refused with StaleStatus (codes.Aborted) before the
// handler runs; a call without a token with codes.InvalidArgument (unless
// OptionalToken). If store's finish fails (SQLStore's commit) after the
// handler succeeded, the call fails with codes.Unavailable: outcome unknown.
func UnaryServerInterceptor(store Store, opts ...ServerOption) grpc.UnaryServerInterceptor {
	cfg := newServerConfig(opts)
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		var resp any
		err := admit(ctx, store, cfg, func(hctx context.Context) error {
			var err error
			resp, err = handler(hctx, req)
			return err
		})
		if err != nil {
			return nil, err
		}
		return resp, nil
	}
}

// StreamServerInterceptor is UnaryServerInterceptor for streams: the stream
// is admitted when it starts and finished when its handler returns, so it
// holds its resource for its whole life. Messages it sent before a failed
// finish were sent; only its final status says the work was not committed.
func StreamServerInterceptor(store Store, opts ...ServerOption) grpc.StreamServerInterceptor {
	cfg := newServerConfig(opts)
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		return admit(ss.Context(), store, cfg, func(hctx context.Context) error {
			return handler(srv, &serverStream{ss, hctx})
		})
	}
}

type serverStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *serverStream) Context() context.Context { return s.ctx }
