package app

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/sw4rm/sw4rm-temporal/frontend"
)

// TestDescriptorSet: GET /descriptors.binpb is a FileDescriptorSet from which a client that
// has nothing else resolves every service the gRPC port serves — each file after the files it
// imports, the same bytes at every request — and an unknown service is an error, not a set
// that silently lacks it.
func TestDescriptorSet(t *testing.T) {
	g := grpc.NewServer()
	frontend.New(nil, nil, nil, nil, nil, nil, frontend.Config{}).Register(g)
	var nilUntilServed *grpc.Server
	h := descriptorsHandler(&nilUntilServed)
	nilUntilServed = g // the handler reads the server at its first request, not before

	get := func() []byte {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, DescriptorsPath, nil))
		require.Equal(t, http.StatusOK, rec.Code)
		require.Contains(t, rec.Header().Get("Content-Type"), "application/x-protobuf")
		body, err := io.ReadAll(rec.Body)
		require.NoError(t, err)
		return body
	}
	body := get()
	require.Equal(t, body, get(), "the same bytes at every request")

	var set descriptorpb.FileDescriptorSet
	require.NoError(t, proto.Unmarshal(body, &set))
	before := map[string]bool{}
	for _, f := range set.GetFile() {
		for _, dep := range f.GetDependency() {
			require.True(t, before[dep], "%s comes after its import %s", f.GetName(), dep)
		}
		require.False(t, before[f.GetName()], "%s is in the set once", f.GetName())
		before[f.GetName()] = true
	}
	files, err := protodesc.NewFiles(&set)
	require.NoError(t, err, "the set is complete: every import is in it")
	served := g.GetServiceInfo()
	require.Contains(t, served, "sw4rm.router.RouterService")
	require.Contains(t, served, "grpc.health.v1.Health")
	for name, info := range served {
		d, err := files.FindDescriptorByName(protoreflect.FullName(name))
		require.NoError(t, err, "service %s is in the set", name)
		sd := d.(protoreflect.ServiceDescriptor)
		require.Equal(t, len(info.Methods), sd.Methods().Len(), name)
	}
	// Only what the port serves and what it needs: every file defines a served service or
	// is imported by one that is in the set.
	imported := map[string]bool{}
	for _, f := range set.GetFile() {
		for _, dep := range f.GetDependency() {
			imported[dep] = true
		}
	}
	for _, f := range set.GetFile() {
		serves := false
		for _, s := range f.GetService() {
			if _, ok := served[f.GetPackage()+"."+s.GetName()]; ok {
				serves = true
			}
		}
		require.True(t, serves || imported[f.GetName()], "%s neither serves nor is needed", f.GetName())
	}

	_, err = descriptorSet([]string{"sw4rm.router.RouterService", "sw4rm.nothing.NoService"})
	require.ErrorContains(t, err, "sw4rm.nothing.NoService")
	_, err = descriptorSet([]string{"sw4rm.common.Envelope"})
	require.ErrorContains(t, err, "not a service")
}
