package frontend

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// notYetBuilt maps each canonical service this server version does not implement yet to the
// capability it lacks and the spec section that defines it. Every call to one of them answers
// codes.Unimplemented with that text instead of pretending to work; an entry is removed when
// its service is built.
var notYetBuilt = map[string]string{}

// notYetBuiltMethods maps single methods of partly built services to the capability they
// lack; it is consulted before notYetBuilt. A service built one slice at a time leaves
// notYetBuilt with its first slice and lists here the methods that are still missing.
var notYetBuiltMethods = map[string]string{}

func unimplemented(fullMethod string) error {
	capability, ok := notYetBuiltMethods[fullMethod]
	if !ok {
		capability, ok = notYetBuilt[serviceOf(fullMethod)]
	}
	if ok {
		return status.Errorf(codes.Unimplemented,
			"%s is not available in this server version: %s is not implemented yet (see docs/conformance.md)", fullMethod, capability)
	}
	return nil
}

func capabilityGateUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err := unimplemented(info.FullMethod); err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

func capabilityGateStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if err := unimplemented(info.FullMethod); err != nil {
		return err
	}
	return handler(srv, ss)
}
