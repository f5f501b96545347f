package app

import (
	"fmt"
	"net/http"
	"slices"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
)

// DescriptorsPath is where the HTTP port serves the descriptor set of the gRPC port's services
// (docs/http1.md, "Discovery"): what server reflection gives an HTTP/2 client, for a client that
// speaks only HTTP/1.1, since reflection is a bidirectional stream that Connect and gRPC-Web
// cannot carry over HTTP/1.1.
const DescriptorsPath = "/descriptors.binpb"

// descriptorSet is the binary google.protobuf.FileDescriptorSet of the files that define the
// named services, with every file they import, transitively. The services are taken in the
// order of their names and each file comes after the files it imports — the order protoc's
// --include_imports writes, which tools that build a registry from a set one file at a time
// (grpcurl -protoset) need. A service that protoregistry.GlobalFiles does not know is an error.
func descriptorSet(services []string) ([]byte, error) {
	names := slices.Sorted(slices.Values(services))
	var set descriptorpb.FileDescriptorSet
	seen := map[string]bool{}
	var add func(protoreflect.FileDescriptor)
	add = func(fd protoreflect.FileDescriptor) {
		if seen[fd.Path()] {
			return
		}
		seen[fd.Path()] = true
		imports := fd.Imports()
		for i := range imports.Len() {
			add(imports.Get(i).FileDescriptor)
		}
		set.File = append(set.File, protodesc.ToFileDescriptorProto(fd))
	}
	for _, name := range names {
		d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(name))
		if err != nil {
			return nil, fmt.Errorf("the descriptor of service %s: %w", name, err)
		}
		sd, ok := d.(protoreflect.ServiceDescriptor)
		if !ok {
			return nil, fmt.Errorf("%s is not a service", name)
		}
		add(sd.ParentFile())
	}
	// Deterministic, so that the set's bytes (and an ETag a proxy derives) do not change
	// between requests of one build.
	return proto.MarshalOptions{Deterministic: true}.Marshal(&set)
}

// descriptorsHandler serves the descriptor set of the services that *g registers. It reads
// *g at the first request: the HTTP handler is built before the gRPC server is, and the
// HTTP port is served only after it is.
func descriptorsHandler(g **grpc.Server) http.Handler {
	build := sync.OnceValues(func() ([]byte, error) {
		var services []string
		for name := range (*g).GetServiceInfo() {
			services = append(services, name)
		}
		return descriptorSet(services)
	})
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		set, err := build()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/x-protobuf; messageType=google.protobuf.FileDescriptorSet")
		_, _ = w.Write(set)
	})
}
