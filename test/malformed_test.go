package test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sw4rm/sw4rm-temporal/proto/registrypb"
	"github.com/sw4rm/sw4rm-temporal/proto/routerpb"
	"github.com/sw4rm/sw4rm-temporal/protocol/wire"
)

// wireBytes is a request or reply as bytes on the wire, for clients that send what no
// protobuf library would encode.
type wireBytes []byte

// bytesCodec sends wireBytes as they are and reads replies into wireBytes.
type bytesCodec struct{}

func (bytesCodec) Name() string { return "proto" }

func (bytesCodec) Marshal(v any) (mem.BufferSlice, error) {
	b, ok := v.(wireBytes)
	if !ok {
		return nil, fmt.Errorf("bytesCodec: %T is not wireBytes", v)
	}
	return mem.BufferSlice{mem.SliceBuffer(b)}, nil
}

func (bytesCodec) Unmarshal(data mem.BufferSlice, v any) error {
	p, ok := v.(*wireBytes)
	if !ok {
		return fmt.Errorf("bytesCodec: %T is not *wireBytes", v)
	}
	*p = data.Materialize()
	return nil
}

// TestMalformedProtobufIsInvalidArgument: a request that is not valid protobuf — a string
// field holding invalid UTF-8, a truncated field — is the caller's error: InvalidArgument
// with validation_error, not grpc-go's default Internal, on unary calls and streams alike.
func TestMalformedProtobufIsInvalidArgument(t *testing.T) {
	sys := start(t, newConfig(t, "memory"))
	conn, err := grpc.NewClient(sys.app.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(bytesCodec{})))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	invalidUTF8 := wireBytes{0x0a, 0x02, 0xff, 0xfe} // field 1 (agent_id), a string of two bytes that are not UTF-8
	truncated := wireBytes{0x0a, 0x10, 'a'}          // field 1 claims 16 bytes and has one
	for name, body := range map[string]wireBytes{"invalid utf-8": invalidUTF8, "truncated": truncated} {
		t.Run(name, func(t *testing.T) {
			var trailer metadata.MD
			var reply wireBytes
			err := conn.Invoke(context.Background(), registrypb.RegistryService_Heartbeat_FullMethodName, body, &reply, grpc.Trailer(&trailer))
			require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
			require.Contains(t, status.Convert(err).Message(), "validation_error: ")
			require.Equal(t, []string{"VALIDATION_ERROR"}, trailer.Get(wire.ErrorCodeTrailer))

			desc := &grpc.StreamDesc{StreamName: "StreamIncoming", ServerStreams: true}
			cs, err := conn.NewStream(context.Background(), desc, routerpb.RouterService_StreamIncoming_FullMethodName)
			require.NoError(t, err)
			require.NoError(t, cs.SendMsg(body))
			require.NoError(t, cs.CloseSend())
			err = cs.RecvMsg(&reply)
			require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
			require.Contains(t, status.Convert(err).Message(), "validation_error: ")
		})
	}
}
