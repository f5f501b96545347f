package proto_test

// Contract tests for the generated SW4RM protobuf code. They read the
// descriptors registered by the generated packages (protoregistry) and compare
// them with the canonical wire contract, first against a hand-written table of
// spot checks and then against every line of
// proto/testdata/wire-contract.md, the repository's copy of the project's wire contract.

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	_ "github.com/sw4rm/sw4rm-temporal/proto/activitypb"
	_ "github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	_ "github.com/sw4rm/sw4rm-temporal/proto/connectorpb"
	_ "github.com/sw4rm/sw4rm-temporal/proto/handoffpb"
	_ "github.com/sw4rm/sw4rm-temporal/proto/hitlpb"
	_ "github.com/sw4rm/sw4rm-temporal/proto/loggingpb"
	_ "github.com/sw4rm/sw4rm-temporal/proto/negotiationpb"
	_ "github.com/sw4rm/sw4rm-temporal/proto/negotiationroompb"
	_ "github.com/sw4rm/sw4rm-temporal/proto/policypb"
	_ "github.com/sw4rm/sw4rm-temporal/proto/reasoningpb"
	_ "github.com/sw4rm/sw4rm-temporal/proto/registrypb"
	"github.com/sw4rm/sw4rm-temporal/proto/routerpb"
	"github.com/sw4rm/sw4rm-temporal/proto/schedulerpb"
	_ "github.com/sw4rm/sw4rm-temporal/proto/toolpb"
	_ "github.com/sw4rm/sw4rm-temporal/proto/workflowpb"
	_ "github.com/sw4rm/sw4rm-temporal/proto/worktreepb"
)

const (
	wantFiles    = 17
	wantServices = 15
	wantMethods  = 57
)

// contractPath is the wire contract the published SDKs speak: the repository's copy in
// testdata (so the test runs in any clone), or SW4RM_WIRE_CONTRACT. TestContractCopyIsCurrent
// keeps the copy equal to the project's shared spec where that is checked out beside the
// repository.
func contractPath() string {
	if p := os.Getenv("SW4RM_WIRE_CONTRACT"); p != "" {
		return p
	}
	return filepath.Join("testdata", "wire-contract.md")
}

// sharedContractPath is the project's shared spec, beside the repository's root.
func sharedContractPath() string {
	return filepath.Join("..", "..", "shared", "spec", "wire-contract.md")
}

func TestContractCopyIsCurrent(t *testing.T) {
	shared, err := os.ReadFile(sharedContractPath())
	if err != nil {
		t.Skipf("no shared spec beside the repository (%v): the test uses the copy in testdata", err)
	}
	copied, err := os.ReadFile(filepath.Join("testdata", "wire-contract.md"))
	if err != nil {
		t.Fatalf("read the repository's copy: %v", err)
	}
	if string(copied) != string(shared) {
		t.Fatalf("proto/testdata/wire-contract.md differs from the shared spec: copy %s over it and check the .proto files against it", sharedContractPath())
	}
}

// sw4rmFiles returns the registered files whose path starts with "sw4rm/".
func sw4rmFiles() map[string]protoreflect.FileDescriptor {
	files := map[string]protoreflect.FileDescriptor{}
	protoregistry.GlobalFiles.RangeFiles(func(fd protoreflect.FileDescriptor) bool {
		if strings.HasPrefix(fd.Path(), "sw4rm/") {
			files[fd.Path()] = fd
		}
		return true
	})
	return files
}

func TestServiceAndMethodCounts(t *testing.T) {
	files := sw4rmFiles()
	if len(files) != wantFiles {
		t.Errorf("got %d sw4rm/*.proto files registered, want %d", len(files), wantFiles)
	}
	services, methods := 0, 0
	for _, fd := range files {
		if !strings.HasPrefix(string(fd.Package()), "sw4rm.") {
			t.Errorf("%s: package %q is not under sw4rm.*", fd.Path(), fd.Package())
		}
		for i := 0; i < fd.Services().Len(); i++ {
			services++
			methods += fd.Services().Get(i).Methods().Len()
		}
	}
	if services != wantServices {
		t.Errorf("got %d services, want %d", services, wantServices)
	}
	if methods != wantMethods {
		t.Errorf("got %d methods, want %d", methods, wantMethods)
	}
}

func findDesc(t *testing.T, name string) protoreflect.Descriptor {
	t.Helper()
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(name))
	if err != nil {
		t.Fatalf("descriptor %s not found: %v", name, err)
	}
	return d
}

func findMethod(t *testing.T, path string) protoreflect.MethodDescriptor {
	t.Helper()
	// path is "/pkg.Service/Method".
	svc, m, ok := strings.Cut(strings.TrimPrefix(path, "/"), "/")
	if !ok {
		t.Fatalf("bad method path %q", path)
	}
	sd, ok := findDesc(t, svc).(protoreflect.ServiceDescriptor)
	if !ok {
		t.Fatalf("%s is not a service", svc)
	}
	md := sd.Methods().ByName(protoreflect.Name(m))
	if md == nil {
		t.Fatalf("method %s not found", path)
	}
	return md
}

func TestSpotChecks(t *testing.T) {
	fields := []struct {
		msg, field string
		number     protoreflect.FieldNumber
		typ        string
	}{
		{"sw4rm.common.Envelope", "message_id", 1, "string"},
		{"sw4rm.common.Envelope", "timestamp", 14, "google.protobuf.Timestamp"},
		{"sw4rm.common.Envelope", "state", 16, "sw4rm.common.EnvelopeState"},
		{"sw4rm.common.Envelope", "parent_correlation_id", 100, "string"},
		{"sw4rm.registry.AgentDescriptor", "registration_type", 100, "sw4rm.registry.RegistrationType"},
		{"sw4rm.registry.AgentDescriptor", "max_concurrent_delegations", 101, "uint32"},
		{"sw4rm.registry.HeartbeatRequest", "health", 3, "map<string,string>"},
		{"sw4rm.handoff.HandoffRequest", "budget", 100, "sw4rm.handoff.BudgetEnvelope"},
		{"sw4rm.handoff.HandoffResponse", "rejection_code", 100, "sw4rm.common.ErrorCode"},
		{"sw4rm.handoff.HandoffResponse", "redirect_to_agent_id", 110, "string"},
		{"sw4rm.router.StreamItem", "seq", 2, "int64"},
		{"sw4rm.router.DeliveryAckRequest", "outcome", 4, "sw4rm.router.DeliveryAckOutcome"},
		{"sw4rm.policy.NegotiationPolicy", "hitl", 8, "sw4rm.policy.NegotiationPolicy.Hitl"},
		{"sw4rm.policy.NegotiationPolicy.Scoring", "llm_weight", 3, "float"},
		{"sw4rm.policy.EffectivePolicy", "applied", 2, "map<string,sw4rm.policy.AgentPreferences>"},
		{"sw4rm.workflow.WorkflowDefinition", "nodes", 2, "map<string,sw4rm.workflow.WorkflowNode>"},
		{"sw4rm.negotiation_room.NegotiationDecision", "votes", 3, "repeated sw4rm.negotiation_room.NegotiationVote"},
	}
	for _, c := range fields {
		md, ok := findDesc(t, c.msg).(protoreflect.MessageDescriptor)
		if !ok {
			t.Errorf("%s is not a message", c.msg)
			continue
		}
		fd := md.Fields().ByName(protoreflect.Name(c.field))
		if fd == nil {
			t.Errorf("%s.%s missing", c.msg, c.field)
			continue
		}
		if fd.Number() != c.number {
			t.Errorf("%s.%s = %d, want %d", c.msg, c.field, fd.Number(), c.number)
		}
		if err := checkFieldType(fd, c.typ); err != nil {
			t.Errorf("%s.%s: %v", c.msg, c.field, err)
		}
	}

	enums := []struct {
		enum, value string
		number      protoreflect.EnumNumber
	}{
		{"sw4rm.common.ErrorCode", "OVERLOADED", 16},
		{"sw4rm.common.ErrorCode", "REDIRECT", 20},
		{"sw4rm.common.ErrorCode", "INTERNAL_ERROR", 99},
		{"sw4rm.common.AgentState", "FAILED_STATE", 10},
		{"sw4rm.common.CommunicationClass", "COMM_CLASS_UNSPECIFIED", 0},
		{"sw4rm.common.EnvelopeState", "ENVELOPE_STATE_TIMED_OUT", 7},
		{"sw4rm.router.DeliveryAckOutcome", "DELIVERY_ACK_OUTCOME_DELIVERED", 0},
		{"sw4rm.registry.RegistrationType", "SWARM_GATEWAY", 2},
	}
	for _, c := range enums {
		ed, ok := findDesc(t, c.enum).(protoreflect.EnumDescriptor)
		if !ok {
			t.Errorf("%s is not an enum", c.enum)
			continue
		}
		v := ed.Values().ByName(protoreflect.Name(c.value))
		if v == nil {
			t.Errorf("%s.%s missing", c.enum, c.value)
		} else if v.Number() != c.number {
			t.Errorf("%s.%s = %d, want %d", c.enum, c.value, v.Number(), c.number)
		}
	}

	methods := []struct {
		path, in, out string
		serverStream  bool
	}{
		{"/sw4rm.router.RouterService/StreamIncoming", "sw4rm.router.StreamRequest", "sw4rm.router.StreamItem", true},
		{"/sw4rm.router.RouterService/AckDelivery", "sw4rm.router.DeliveryAckRequest", "sw4rm.router.DeliveryAckResponse", false},
		{"/sw4rm.tool.ToolService/CallStream", "sw4rm.tool.ToolCall", "sw4rm.tool.ToolFrame", true},
		{"/sw4rm.tool.ToolService/Call", "sw4rm.tool.ToolCall", "sw4rm.tool.ToolFrame", false},
		{"/sw4rm.scheduler.SchedulerPolicyService/HitlAction", "sw4rm.scheduler.HitlActionRequest", "sw4rm.scheduler.HitlActionResponse", false},
		{"/sw4rm.reasoning.ReasoningProxy/Summarize", "sw4rm.reasoning.SummarizeRequest", "sw4rm.reasoning.SummarizeResponse", false},
		{"/sw4rm.handoff.HandoffService/CancelDelegation", "sw4rm.handoff.CancelDelegation", "sw4rm.handoff.CancelDelegationResponse", false},
		{"/sw4rm.handoff.HandoffService/RequestHandoff", "sw4rm.handoff.HandoffRequest", "sw4rm.common.Empty", false},
	}
	for _, c := range methods {
		md := findMethod(t, c.path)
		if got := string(md.Input().FullName()); got != c.in {
			t.Errorf("%s input = %s, want %s", c.path, got, c.in)
		}
		if got := string(md.Output().FullName()); got != c.out {
			t.Errorf("%s output = %s, want %s", c.path, got, c.out)
		}
		if md.IsStreamingClient() || md.IsStreamingServer() != c.serverStream {
			t.Errorf("%s streaming: client=%v server=%v, want client=false server=%v",
				c.path, md.IsStreamingClient(), md.IsStreamingServer(), c.serverStream)
		}
	}

	// The generated gRPC code must use the same paths.
	if routerpb.RouterService_StreamIncoming_FullMethodName != "/sw4rm.router.RouterService/StreamIncoming" {
		t.Errorf("RouterService_StreamIncoming_FullMethodName = %q", routerpb.RouterService_StreamIncoming_FullMethodName)
	}
	if len(routerpb.RouterService_ServiceDesc.Streams) != 1 || !routerpb.RouterService_ServiceDesc.Streams[0].ServerStreams ||
		routerpb.RouterService_ServiceDesc.Streams[0].ClientStreams {
		t.Errorf("RouterService_ServiceDesc.Streams = %+v, want one server stream", routerpb.RouterService_ServiceDesc.Streams)
	}
	if schedulerpb.SchedulerPolicyService_HitlAction_FullMethodName != "/sw4rm.scheduler.SchedulerPolicyService/HitlAction" {
		t.Errorf("SchedulerPolicyService_HitlAction_FullMethodName = %q", schedulerpb.SchedulerPolicyService_HitlAction_FullMethodName)
	}
}

var scalarKinds = map[string]protoreflect.Kind{
	"double":   protoreflect.DoubleKind,
	"float":    protoreflect.FloatKind,
	"int32":    protoreflect.Int32Kind,
	"int64":    protoreflect.Int64Kind,
	"uint32":   protoreflect.Uint32Kind,
	"uint64":   protoreflect.Uint64Kind,
	"sint32":   protoreflect.Sint32Kind,
	"sint64":   protoreflect.Sint64Kind,
	"fixed32":  protoreflect.Fixed32Kind,
	"fixed64":  protoreflect.Fixed64Kind,
	"sfixed32": protoreflect.Sfixed32Kind,
	"sfixed64": protoreflect.Sfixed64Kind,
	"bool":     protoreflect.BoolKind,
	"string":   protoreflect.StringKind,
	"bytes":    protoreflect.BytesKind,
}

// checkFieldType checks fd against a contract type string: a scalar name, a
// fully-qualified message or enum name, "repeated T" or "map<K,V>". Plain
// fields must be proto3 implicit-presence singular fields (no optional, no oneof).
func checkFieldType(fd protoreflect.FieldDescriptor, typ string) error {
	typ = strings.TrimSpace(typ)
	switch {
	case strings.HasPrefix(typ, "map<"):
		if !strings.HasSuffix(typ, ">") {
			return fmt.Errorf("bad contract map type %q", typ)
		}
		k, v, ok := strings.Cut(strings.TrimSuffix(strings.TrimPrefix(typ, "map<"), ">"), ",")
		if !ok {
			return fmt.Errorf("bad contract map type %q", typ)
		}
		if !fd.IsMap() {
			return fmt.Errorf("want %s, got non-map %s", typ, describeType(fd))
		}
		if err := checkBaseType(fd.MapKey(), k); err != nil {
			return fmt.Errorf("map key: %w", err)
		}
		if err := checkBaseType(fd.MapValue(), v); err != nil {
			return fmt.Errorf("map value: %w", err)
		}
		return nil
	case strings.HasPrefix(typ, "repeated "):
		if !fd.IsList() {
			return fmt.Errorf("want %s, got %s", typ, describeType(fd))
		}
		return checkBaseType(fd, strings.TrimPrefix(typ, "repeated "))
	default:
		if fd.Cardinality() != protoreflect.Optional || fd.IsList() || fd.IsMap() {
			return fmt.Errorf("want singular %s, got %s", typ, describeType(fd))
		}
		if fd.HasOptionalKeyword() || fd.ContainingOneof() != nil {
			return fmt.Errorf("want plain proto3 field %s, got optional/oneof field", typ)
		}
		return checkBaseType(fd, typ)
	}
}

func checkBaseType(fd protoreflect.FieldDescriptor, typ string) error {
	typ = strings.TrimSpace(typ)
	if k, ok := scalarKinds[typ]; ok {
		if fd.Kind() != k {
			return fmt.Errorf("want %s, got %s", typ, describeType(fd))
		}
		return nil
	}
	switch fd.Kind() {
	case protoreflect.MessageKind:
		if got := string(fd.Message().FullName()); got != typ {
			return fmt.Errorf("want message %s, got %s", typ, got)
		}
	case protoreflect.EnumKind:
		if got := string(fd.Enum().FullName()); got != typ {
			return fmt.Errorf("want enum %s, got %s", typ, got)
		}
	default:
		return fmt.Errorf("want %s, got %s", typ, describeType(fd))
	}
	return nil
}

func describeType(fd protoreflect.FieldDescriptor) string {
	var base string
	switch fd.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		base = string(fd.Message().FullName())
	case protoreflect.EnumKind:
		base = string(fd.Enum().FullName())
	default:
		base = fd.Kind().String()
	}
	switch {
	case fd.IsMap():
		return "map " + base
	case fd.IsList():
		return "repeated " + base
	}
	return base
}

// ---- wire-contract.md parsing ----

type contractMethod struct {
	name, in, out              string
	clientStream, serverStream bool
}

type contractField struct {
	name   string
	number int
	typ    string
}

type contract struct {
	files    map[string]string                             // "sw4rm/x.proto" -> package
	services map[string][]contractMethod                   // full service name -> methods
	svcFile  map[string]string                             // full service name -> file
	messages map[string][]contractField                    // full message name -> fields
	msgFile  map[string]string                             // full message name -> file
	enums    map[string]map[string]protoreflect.EnumNumber // full enum name -> values
	enumFile map[string]string
}

var (
	reFile    = regexp.MustCompile("^## (\\S+\\.proto) — package `([\\w.]+)`\\s*$")
	reService = regexp.MustCompile("^service `([\\w.]+)`:\\s*$")
	reMethod  = regexp.MustCompile("^- `(\\w+)\\((stream )?([\\w.]+)\\) -> (stream )?([\\w.]+)`\\s*$")
	reMessage = regexp.MustCompile("^message `([\\w.]+)`:(.*)$")
	reEnum    = regexp.MustCompile("^enum `([\\w.]+)`:(.*)$")
	reField   = regexp.MustCompile(`^(\w+)=(\d+) \((.+)\)$`)
	reValue   = regexp.MustCompile(`^(\w+)=(-?\d+)$`)
)

func parseContract(path string) (*contract, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()

	c := &contract{
		files:    map[string]string{},
		services: map[string][]contractMethod{},
		svcFile:  map[string]string{},
		messages: map[string][]contractField{},
		msgFile:  map[string]string{},
		enums:    map[string]map[string]protoreflect.EnumNumber{},
		enumFile: map[string]string{},
	}
	var file, pkg, service string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1024*1024), 1024*1024)
	lineNo := 0
	for sc.Scan() {
		lineNo++
		line := strings.TrimRight(sc.Text(), " \t\r")
		fail := func(format string, args ...any) error {
			return fmt.Errorf("%s:%d: %s: %q", path, lineNo, fmt.Sprintf(format, args...), line)
		}
		if m := reFile.FindStringSubmatch(line); m != nil {
			file, pkg, service = "sw4rm/"+m[1], m[2], ""
			if _, dup := c.files[file]; dup {
				return nil, fail("duplicate file")
			}
			c.files[file] = pkg
			continue
		}
		if strings.HasPrefix(line, "## ") {
			// Any other level-2 heading ends the listing section.
			file, pkg, service = "", "", ""
			continue
		}
		if file == "" {
			continue
		}
		switch {
		case reService.MatchString(line):
			service = reService.FindStringSubmatch(line)[1]
			if !strings.HasPrefix(service, pkg+".") {
				return nil, fail("service not in package %s", pkg)
			}
			if _, dup := c.services[service]; dup {
				return nil, fail("duplicate service")
			}
			c.services[service] = nil
			c.svcFile[service] = file
		case strings.HasPrefix(line, "- `"):
			m := reMethod.FindStringSubmatch(line)
			if m == nil {
				return nil, fail("unparsable method line")
			}
			if service == "" {
				return nil, fail("method outside a service")
			}
			c.services[service] = append(c.services[service], contractMethod{
				name: m[1], clientStream: m[2] != "", in: m[3], serverStream: m[4] != "", out: m[5],
			})
		case strings.HasPrefix(line, "message `"):
			service = ""
			m := reMessage.FindStringSubmatch(line)
			if m == nil {
				return nil, fail("unparsable message line")
			}
			name := pkg + "." + m[1]
			if _, dup := c.messages[name]; dup {
				return nil, fail("duplicate message")
			}
			fields := []contractField{}
			if body := strings.TrimSpace(m[2]); body != "" {
				for _, part := range strings.Split(body, ";") {
					fm := reField.FindStringSubmatch(strings.TrimSpace(part))
					if fm == nil {
						return nil, fail("unparsable field %q", part)
					}
					n, _ := strconv.Atoi(fm[2])
					fields = append(fields, contractField{name: fm[1], number: n, typ: fm[3]})
				}
			}
			c.messages[name] = fields
			c.msgFile[name] = file
		case strings.HasPrefix(line, "enum `"):
			service = ""
			m := reEnum.FindStringSubmatch(line)
			if m == nil {
				return nil, fail("unparsable enum line")
			}
			name := pkg + "." + m[1]
			if _, dup := c.enums[name]; dup {
				return nil, fail("duplicate enum")
			}
			values := map[string]protoreflect.EnumNumber{}
			for _, part := range strings.Split(m[2], ",") {
				vm := reValue.FindStringSubmatch(strings.TrimSpace(part))
				if vm == nil {
					return nil, fail("unparsable enum value %q", part)
				}
				n, _ := strconv.Atoi(vm[2])
				if _, dup := values[vm[1]]; dup {
					return nil, fail("duplicate enum value %s", vm[1])
				}
				values[vm[1]] = protoreflect.EnumNumber(n)
			}
			c.enums[name] = values
			c.enumFile[name] = file
		}
	}
	return c, sc.Err()
}

// collect gathers every message (excluding synthetic map entries) and enum,
// including nested ones, declared in the sw4rm files.
func collect(files map[string]protoreflect.FileDescriptor) (map[string]protoreflect.MessageDescriptor, map[string]protoreflect.EnumDescriptor) {
	msgs := map[string]protoreflect.MessageDescriptor{}
	enums := map[string]protoreflect.EnumDescriptor{}
	var walk func(ms protoreflect.MessageDescriptors, es protoreflect.EnumDescriptors)
	walk = func(ms protoreflect.MessageDescriptors, es protoreflect.EnumDescriptors) {
		for i := 0; i < es.Len(); i++ {
			enums[string(es.Get(i).FullName())] = es.Get(i)
		}
		for i := 0; i < ms.Len(); i++ {
			md := ms.Get(i)
			if md.IsMapEntry() {
				continue
			}
			msgs[string(md.FullName())] = md
			walk(md.Messages(), md.Enums())
		}
	}
	for _, fd := range files {
		walk(fd.Messages(), fd.Enums())
	}
	return msgs, enums
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func TestMatchesWireContract(t *testing.T) {
	path := contractPath()
	c, err := parseContract(path)
	if err != nil {
		t.Fatalf("parse %s: %v", path, err)
	}

	// Guard against the parser silently matching nothing.
	nMethods := 0
	for _, ms := range c.services {
		nMethods += len(ms)
	}
	if len(c.files) != wantFiles || len(c.services) != wantServices || nMethods != wantMethods {
		t.Fatalf("parsed %d files, %d services, %d methods from %s; want %d, %d, %d",
			len(c.files), len(c.services), nMethods, path, wantFiles, wantServices, wantMethods)
	}
	if len(c.messages) == 0 || len(c.enums) == 0 {
		t.Fatalf("parsed %d messages and %d enums from %s", len(c.messages), len(c.enums), path)
	}
	t.Logf("contract: %d files, %d services, %d methods, %d messages, %d enums",
		len(c.files), len(c.services), nMethods, len(c.messages), len(c.enums))

	files := sw4rmFiles()

	t.Run("files", func(t *testing.T) {
		for _, name := range sortedKeys(c.files) {
			fd, ok := files[name]
			if !ok {
				t.Errorf("file %s not registered", name)
				continue
			}
			if string(fd.Package()) != c.files[name] {
				t.Errorf("file %s: package %s, want %s", name, fd.Package(), c.files[name])
			}
		}
		for _, name := range sortedKeys(files) {
			if _, ok := c.files[name]; !ok {
				t.Errorf("file %s is registered but not in the contract", name)
			}
		}
	})

	t.Run("services", func(t *testing.T) {
		seen := map[string]bool{}
		for _, fd := range files {
			for i := 0; i < fd.Services().Len(); i++ {
				sd := fd.Services().Get(i)
				name := string(sd.FullName())
				seen[name] = true
				if _, ok := c.services[name]; !ok {
					t.Errorf("service %s (%s) is not in the contract", name, fd.Path())
				}
			}
		}
		for _, name := range sortedKeys(c.services) {
			if !seen[name] {
				t.Errorf("service %s missing", name)
				continue
			}
			sd := findDesc(t, name).(protoreflect.ServiceDescriptor)
			if got := sd.ParentFile().Path(); got != c.svcFile[name] {
				t.Errorf("service %s declared in %s, want %s", name, got, c.svcFile[name])
			}
			want := c.services[name]
			if sd.Methods().Len() != len(want) {
				t.Errorf("service %s has %d methods, want %d", name, sd.Methods().Len(), len(want))
			}
			for _, cm := range want {
				path := "/" + name + "/" + cm.name
				md := sd.Methods().ByName(protoreflect.Name(cm.name))
				if md == nil {
					t.Errorf("method %s missing", path)
					continue
				}
				if got := string(md.Input().FullName()); got != cm.in {
					t.Errorf("%s input = %s, want %s", path, got, cm.in)
				}
				if got := string(md.Output().FullName()); got != cm.out {
					t.Errorf("%s output = %s, want %s", path, got, cm.out)
				}
				if md.IsStreamingClient() != cm.clientStream || md.IsStreamingServer() != cm.serverStream {
					t.Errorf("%s streaming client=%v server=%v, want client=%v server=%v", path,
						md.IsStreamingClient(), md.IsStreamingServer(), cm.clientStream, cm.serverStream)
				}
			}
		}
	})

	msgs, enums := collect(files)

	t.Run("messages", func(t *testing.T) {
		for _, name := range sortedKeys(msgs) {
			if _, ok := c.messages[name]; !ok {
				t.Errorf("message %s is not in the contract", name)
			}
		}
		for _, name := range sortedKeys(c.messages) {
			md, ok := msgs[name]
			if !ok {
				t.Errorf("message %s missing", name)
				continue
			}
			if got := md.ParentFile().Path(); got != c.msgFile[name] {
				t.Errorf("message %s declared in %s, want %s", name, got, c.msgFile[name])
			}
			want := c.messages[name]
			if md.Fields().Len() != len(want) {
				t.Errorf("message %s has %d fields, want %d", name, md.Fields().Len(), len(want))
			}
			if md.Oneofs().Len() != 0 {
				t.Errorf("message %s has %d oneofs, want none", name, md.Oneofs().Len())
			}
			for _, cf := range want {
				fd := md.Fields().ByName(protoreflect.Name(cf.name))
				if fd == nil {
					t.Errorf("%s.%s missing", name, cf.name)
					continue
				}
				if int(fd.Number()) != cf.number {
					t.Errorf("%s.%s has number %d, want %d", name, cf.name, fd.Number(), cf.number)
				}
				if err := checkFieldType(fd, cf.typ); err != nil {
					t.Errorf("%s.%s: %v", name, cf.name, err)
				}
			}
		}
	})

	t.Run("enums", func(t *testing.T) {
		for _, name := range sortedKeys(enums) {
			if _, ok := c.enums[name]; !ok {
				t.Errorf("enum %s is not in the contract", name)
			}
		}
		for _, name := range sortedKeys(c.enums) {
			ed, ok := enums[name]
			if !ok {
				t.Errorf("enum %s missing", name)
				continue
			}
			if got := ed.ParentFile().Path(); got != c.enumFile[name] {
				t.Errorf("enum %s declared in %s, want %s", name, got, c.enumFile[name])
			}
			want := c.enums[name]
			if ed.Values().Len() != len(want) {
				t.Errorf("enum %s has %d values, want %d", name, ed.Values().Len(), len(want))
			}
			for _, vname := range sortedKeys(want) {
				v := ed.Values().ByName(protoreflect.Name(vname))
				if v == nil {
					t.Errorf("%s.%s missing", name, vname)
					continue
				}
				if v.Number() != want[vname] {
					t.Errorf("%s.%s = %d, want %d", name, vname, v.Number(), want[vname])
				}
			}
		}
	})
}
