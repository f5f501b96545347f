package frontend

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/vanguard"
	"connectrpc.com/vanguard/vanguardgrpc"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/protocol/wire"
)

// HTTP/1.1 fallback (§5.1): the gRPC port also serves every service it registers as the
// Connect protocol (JSON and binary, HTTP/1.1 and HTTP/2) and as gRPC-Web, through
// connectrpc.com/vanguard. Vanguard turns each such call into a gRPC call to the same
// grpc.Server, so authentication, authorization, the error table, limits and metrics apply
// unchanged. What vanguard cannot carry across is the request's bytes as the client sent
// them: it decodes JSON and re-encodes protobuf, and a signature covers the bytes as sent
// (docs/signing.md). So before vanguard sees a signed call, HTTPHandler hashes its message's
// bytes and puts the digest in the request's context, where the interceptor finds it.

// Protocol names the wire protocol a call arrived in, as the context of its handler carries it.
type Protocol string

// The protocols the gRPC port serves.
const (
	// ProtocolGRPC is gRPC over HTTP/2, served by grpc-go's own transport.
	ProtocolGRPC Protocol = "grpc"
	// ProtocolConnect is the Connect protocol, over HTTP/1.1 or HTTP/2.
	ProtocolConnect Protocol = "connect"
	// ProtocolGRPCWeb is gRPC-Web, over HTTP/1.1 or HTTP/2.
	ProtocolGRPCWeb Protocol = "grpc-web"
)

// transcodedKey carries a *transcoded in the context of a call that arrived through vanguard.
type transcodedKey struct{}

// transcoded is what the HTTP handler learned of a call before vanguard transcoded it.
type transcoded struct {
	protocol Protocol
	// wire is the digest of the request message's bytes as the client sent them, when the
	// call is signed.
	wire decoded
}

// ProtocolOf reports the protocol the call whose context ctx is arrived in.
func ProtocolOf(ctx context.Context) Protocol {
	if t, ok := ctx.Value(transcodedKey{}).(*transcoded); ok {
		return t.protocol
	}
	return ProtocolGRPC
}

// wireDigestOf returns the digest the HTTP handler took of a transcoded signed call's request.
func wireDigestOf(ctx context.Context) (decoded, bool) {
	t, ok := ctx.Value(transcodedKey{}).(*transcoded)
	if !ok || (!t.wire.hashed && t.wire.err == nil) {
		return decoded{}, false
	}
	return t.wire, true
}

// HTTPHandler serves g's services as Connect and gRPC-Web, and gRPC itself when a caller
// reaches it through net/http (a gRPC call the port's listener hands to the HTTP server,
// such as one behind a proxy that terminates TLS with HTTP/2). maxRequest bounds the bytes a
// request's first message may have to be read here, as grpc.MaxRecvMsgSize bounds a gRPC
// request.
func HTTPHandler(g *grpc.Server, maxRequest int) (http.Handler, error) {
	tc, err := vanguardgrpc.NewTranscoder(g,
		vanguard.WithDefaultServiceOptions(vanguard.WithMaxMessageBufferBytes(uint32(maxRequest))),
		vanguard.WithCodec(func(r vanguard.TypeResolver) vanguard.Codec { return jsonCodec{vanguard.NewJSONCodec(r)} }),
	)
	if err != nil {
		return nil, fmt.Errorf("serve Connect and gRPC-Web: %w", err)
	}
	errs := connect.NewErrorWriter()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ct := r.Header.Get("Content-Type")
		if r.ProtoMajor == 2 && isGRPC(ct) {
			// Native gRPC: nothing to transcode.
			g.ServeHTTP(w, r)
			return
		}
		t := &transcoded{protocol: ProtocolConnect}
		if strings.HasPrefix(ct, "application/grpc-web") {
			t.protocol = ProtocolGRPCWeb
		}
		signed, isJSON := r.Header.Get(wire.SignatureKey) != "", isJSONContent(ct)
		if signed || isJSON {
			msg, read, err := firstMessage(r, ct, maxRequest)
			if signed && (read || err != nil) {
				t.wire.err = err
				if err == nil {
					t.wire.digest, t.wire.hashed = sha256.Sum256(msg), true
				}
			}
			if isJSON && read && err == nil {
				if err := checkJSON(r.URL.Path, msg); err != nil {
					_ = errs.Write(w, r, err)
					return
				}
			}
		}
		tc.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), transcodedKey{}, t)))
	}), nil
}

// isGRPC reports whether a content type is gRPC's own (not gRPC-Web's).
func isGRPC(ct string) bool {
	return ct == "application/grpc" || strings.HasPrefix(ct, "application/grpc+") || strings.HasPrefix(ct, "application/grpc;")
}

// isJSONContent reports whether a Connect or gRPC-Web content type carries JSON.
func isJSONContent(ct string) bool {
	ct, _, _ = strings.Cut(ct, ";")
	return ct == "application/json" || ct == "application/connect+json" || ct == "application/grpc-web+json"
}

// checkJSON decodes a JSON request message for the method at path, returning the error
// table's answer when it does not decode: InvalidArgument with validation_error and the
// sw4rm-error-code trailer, as a malformed protobuf request gets over gRPC (malformed). It
// decodes before vanguard does, at the cost of a second decoding of JSON requests, because
// vanguard answers its own decoding failures without trailers. An unknown method is left
// for vanguard to answer.
func checkJSON(path string, msg []byte) error {
	svc, method, ok := strings.Cut(strings.TrimPrefix(path, "/"), "/")
	if !ok {
		return nil
	}
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(svc))
	if err != nil {
		return nil
	}
	sd, ok := d.(protoreflect.ServiceDescriptor)
	if !ok {
		return nil
	}
	md := sd.Methods().ByName(protoreflect.Name(method))
	if md == nil {
		return nil
	}
	mt, err := protoregistry.GlobalTypes.FindMessageByName(md.Input().FullName())
	if err != nil {
		return nil
	}
	// vanguard's options: unknown fields are ignored, as protobuf ignores them.
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(msg, mt.New().Interface()); err != nil {
		return invalidJSON(md.Input().FullName(), err)
	}
	return nil
}

// invalidJSON is the answer to a JSON request message of type name that does not decode.
func invalidJSON(name protoreflect.FullName, err error) *connect.Error {
	cerr := connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("validation_error: the request is not valid JSON for %s: %w", name, err))
	cerr.Meta().Set(wire.ErrorCodeTrailer, commonpb.ErrorCode_VALIDATION_ERROR.String())
	return cerr
}

// firstMessage reads the request message of a Connect or gRPC-Web call as it was sent
// (docs/signing.md, "Over Connect and gRPC-Web"): the body of a Connect unary call, the
// payload of the first enveloped message otherwise, in both cases after decompression. The
// body it reads is put back, so vanguard reads the same bytes. read is false when the body
// is too large, cut short or unreadable, which it leaves for vanguard or grpc-go to answer;
// a compression it does not know is an error.
func firstMessage(r *http.Request, ct string, maxRequest int) (msg []byte, read bool, err error) {
	limit := int64(maxRequest) + 5
	body, rerr := io.ReadAll(io.LimitReader(r.Body, limit+1))
	r.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(body), r.Body), r.Body}
	if rerr != nil || int64(len(body)) > limit {
		return nil, false, nil
	}
	var compressed bool
	var encoding string
	if strings.HasPrefix(ct, "application/connect+") || strings.HasPrefix(ct, "application/grpc-web") {
		if len(body) < 5 {
			return nil, false, nil
		}
		n := binary.BigEndian.Uint32(body[1:5])
		if uint64(len(body)-5) < uint64(n) {
			return nil, false, nil
		}
		msg, compressed = body[5:5+n], body[0]&1 != 0
		encoding = r.Header.Get("Connect-Content-Encoding")
		if strings.HasPrefix(ct, "application/grpc-web") {
			encoding = r.Header.Get("Grpc-Encoding")
		}
	} else {
		msg = body
		encoding = r.Header.Get("Content-Encoding")
		compressed = encoding != "" && encoding != "identity"
	}
	if !compressed {
		return msg, true, nil
	}
	if encoding != "gzip" {
		return nil, false, fmt.Errorf("the request is compressed with %q; only gzip is accepted", encoding)
	}
	zr, err := gzip.NewReader(bytes.NewReader(msg))
	if err != nil {
		return nil, false, fmt.Errorf("the request's gzip body: %w", err)
	}
	msg, err = io.ReadAll(io.LimitReader(zr, limit))
	if err != nil {
		return nil, false, fmt.Errorf("the request's gzip body: %w", err)
	}
	return msg, true, nil
}

// DefaultStreamKeepAlive is how long a stream over Connect or gRPC-Web stays silent before it
// is sent an empty keep-alive item: well under the idle timeouts of common proxies (60 s).
const DefaultStreamKeepAlive = 15 * time.Second

// keepAlive returns ss, sending an empty item (seq 0 or frame_no 0, which clients skip) when
// it opens and each time it has been silent for every, when the call arrived as Connect or
// gRPC-Web: HTTP/1.1 has no ping, and a proxy cuts a response that stays silent. A native
// gRPC stream is returned as it is (HTTP/2 pings keep it). stop ends the keep-alives; call
// it before the handler returns.
func keepAlive[T any](ss grpc.ServerStreamingServer[T], every time.Duration) (_ grpc.ServerStreamingServer[T], stop func()) {
	ctx := ss.Context()
	if ProtocolOf(ctx) == ProtocolGRPC {
		return ss, func() {}
	}
	if every <= 0 {
		every = DefaultStreamKeepAlive
	}
	// The first item goes at once: vanguard sends a stream's response headers with its first
	// message, and a client that waits for the headers before it reads (connect-go's
	// CallServerStream) would otherwise wait a whole interval on a quiet stream.
	k := &keepAliveStream[T]{ServerStreamingServer: ss, every: every, timer: time.NewTimer(0)}
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-done:
				return
			case <-k.timer.C:
				if k.Send(new(T)) != nil {
					return
				}
			}
		}
	}()
	var once sync.Once
	return k, func() { once.Do(func() { close(done); k.timer.Stop() }) }
}

// keepAliveStream serializes a stream's sends (grpc-go allows one sender at a time) and
// restarts the silence timer at each.
type keepAliveStream[T any] struct {
	grpc.ServerStreamingServer[T]
	every time.Duration
	mu    sync.Mutex
	timer *time.Timer
}

// Send sends m and restarts the silence timer.
func (k *keepAliveStream[T]) Send(m *T) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	err := k.ServerStreamingServer.Send(m)
	k.timer.Reset(k.every)
	return err
}

// jsonCodec is vanguard's JSON codec with the error table's code for a message that does not
// decode (InvalidArgument and validation_error, where vanguard would answer Unknown), for what
// checkJSON did not read: a request too large for it, or a later message of a stream.
type jsonCodec struct{ *vanguard.JSONCodec }

// Unmarshal implements vanguard.Codec.
func (c jsonCodec) Unmarshal(data []byte, msg proto.Message) error {
	if err := c.JSONCodec.Unmarshal(data, msg); err != nil {
		return invalidJSON(msg.ProtoReflect().Descriptor().FullName(), err)
	}
	return nil
}
